package archiver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// The archiver alone (no admission policy: this package's cluster runs none) against a tenant
// holding only the edit role in its own namespace.

// TestForgedOwnerNeverFiledUnderAnotherTenantsJob: a tenant's pod whose controlling owner
// reference names another namespace's VcJob (by a name that climbs out of the tenant's directory,
// and the victim's UID), at creation or patched onto a running pod with the pod finalizer, is never
// recorded or captured under the victim's job: the victim's archived record, manifest and folder
// stay as they were, a victim job running meanwhile is archived with its own pod only, and nothing
// of the forged pods is stored anywhere.
func TestForgedOwnerNeverFiledUnderAnotherTenantsJob(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	victimNS, attackNS := env.Namespace(t), env.Namespace(t)
	rig := tenantsRig(t, env, victimNS, attackNS)
	rig.Start(t)

	archived := testbed.Job(victimNS, "victim-job").Task("worker", 1, []string{"main"}).Obj()
	stack.PodLogs(t, env, victimNS, archived.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	stack.CreateAs(t, env, "victor", archived)
	archived = rig.WaitArchived(t, archived, 3*time.Minute)
	before := snapshotArchive(t, rig, archived)

	live := testbed.Job(victimNS, "live-job").Task("worker", 1, []string{"main"}, testbed.RunsFor("45s")).Obj()
	stack.PodLogs(t, env, victimNS, live.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	stack.CreateAs(t, env, "victor", live)
	live = stack.WaitPhase(t, env, live, batchv1alpha1.Running, 2*time.Minute)

	mallory := stack.TenantClient(t, env, attackNS, "mallory")
	node := env.AddNode(t)
	var forged []*corev1.Pod
	// (a) Created with the reference, against the archived job and the running one.
	for _, victim := range []*batchv1alpha1.Job{archived, live} {
		p := tenantPod(attackNS, "forged-"+victim.Name, node)
		p.Labels = map[string]string{tracking.JobPodLabel: victim.Name}
		p.OwnerReferences = []metav1.OwnerReference{forgedRef(attackNS, victim)}
		env.SetPodLogs(t, attackNS, p.Name, map[string]testbed.ContainerLogs{"main": {Current: stack.SampleChunks("forged " + p.Name)}})
		if err := mallory.Create(t.Context(), p); err != nil {
			t.Fatalf("create pod %s as the tenant: %v", p.Name, err)
		}
		forged = append(forged, p)
	}
	// (b) A running pod of the tenant's, patched afterwards to carry it and the pod finalizer.
	patched := tenantPod(attackNS, "patched-later", node)
	env.SetPodLogs(t, attackNS, patched.Name, map[string]testbed.ContainerLogs{"main": {Current: stack.SampleChunks("forged " + patched.Name)}})
	if err := mallory.Create(t.Context(), patched); err != nil {
		t.Fatalf("create pod %s as the tenant: %v", patched.Name, err)
	}
	stack.WaitPodsRunning(t, env, 1, time.Minute, client.InNamespace(attackNS), client.MatchingFields{"metadata.name": patched.Name})
	base := patched.DeepCopy()
	patched.Labels = map[string]string{tracking.JobPodLabel: archived.Name}
	patched.OwnerReferences = []metav1.OwnerReference{forgedRef(attackNS, archived)}
	patched.Finalizers = append(patched.Finalizers, tracking.PodFinalizer)
	if err := mallory.Patch(t.Context(), patched, client.MergeFrom(base)); err != nil {
		t.Fatalf("patch pod %s as the tenant: %v", patched.Name, err)
	}
	forged = append(forged, patched)

	// The archiver lets each go at once, saying why; nothing holds them.
	attacker := *rig
	attacker.NS = attackNS
	for _, p := range forged {
		waitFinalizerGone(t, &attacker, p.Name, time.Minute)
		expectPodEvent(t, env, p, "Released", "names no VcJob of namespace "+attackNS)
	}
	live = rig.WaitArchived(t, live, 3*time.Minute)

	var uids []string
	for _, p := range forged {
		uids = append(uids, string(p.UID))
	}
	if rows, err := rig.Records.PodsByUID(t.Context(), uids); err != nil || len(rows) != 0 {
		t.Errorf("forged pods recorded: %+v (%v), want no row", rows, err)
	}
	for _, key := range rig.Keys(t, "") {
		for _, p := range forged {
			if strings.Contains(key, string(p.UID)) || strings.Contains(key, p.Name) {
				t.Errorf("object %s stored for forged pod %s", key, p.Name)
			}
		}
	}
	if diff := cmp.Diff(before, snapshotArchive(t, rig, archived)); diff != "" {
		t.Errorf("archived victim job changed (-before +after):\n%s", diff)
	}
	got := snapshotArchive(t, rig, live)
	if want := []string{testbed.PodName(live.Name, "worker", 0)}; !slices.Equal(got.Pods, want) || !slices.Equal(got.ManifestPods, want) {
		t.Errorf("running victim job archived with pods %q, manifest pods %q; want only %q", got.Pods, got.ManifestPods, want)
	}
	if got.State != record.ArchiveArchived || live.Annotations[tracking.ArchivedAsAnnotation] != string(record.ArchiveArchived) {
		t.Errorf("running victim job %s (%q), want archived", got.State, live.Annotations[tracking.ArchivedReasonAnnotation])
	}
	for _, key := range got.Keys {
		if !strings.Contains(key, "/pods/") || strings.Contains(key, "/pods/"+testbed.PodName(live.Name, "worker", 0)+"/") {
			continue
		}
		t.Errorf("object %s in the running victim job's folder is not of its pod", key)
	}
}

// TestJobNotArchivedWhileOwnedPodOutOfView: a tenant removes volcano.sh/job-name from a running
// pod of its job before the archiver saw it (the archiver is down), which takes the pod out of the
// archiver's cache and out of its record. The job is never recorded archived: the pod is found
// from the API as the job's, recorded released with the reason, and the job released with it.
func TestJobNotArchivedWhileOwnedPodOutOfView(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	rig := tenantsRig(t, env, ns)

	job := testbed.Job(ns, "hidden").Task("worker", 2, []string{"main"}, testbed.RunsFor("20s")).Obj()
	stack.PodLogs(t, env, ns, job.Name, map[string]int{"worker": 2}, []string{"main"}, false)
	stack.CreateAs(t, env, "owen", job) // the job's submitter; mallory, the tenant, holds edit only
	stack.WaitPodsRunning(t, env, 2, time.Minute, client.InNamespace(ns))
	hidden := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: testbed.PodName(job.Name, "worker", 0)}}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(hidden), hidden); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(hidden.Finalizers, tracking.PodFinalizer) {
		t.Fatalf("pod %s has no pod finalizer (%v): the webhook did not see it", hidden.Name, hidden.Finalizers)
	}
	base := hidden.DeepCopy()
	delete(hidden.Labels, tracking.JobPodLabel)
	if err := stack.TenantClient(t, env, ns, "mallory").Patch(t.Context(), hidden, client.MergeFrom(base)); err != nil {
		t.Fatalf("remove the label as the tenant: %v", err)
	}

	rig.Start(t)
	j := rig.WaitArchived(t, job, 3*time.Minute)
	if as := j.Annotations[tracking.ArchivedAsAnnotation]; as != string(record.ArchiveReleased) {
		t.Errorf("job finalized as %q (%q), want released: its pod %s was never archived", as, j.Annotations[tracking.ArchivedReasonAnnotation], hidden.Name)
	}
	row, err := rig.Records.Job(t.Context(), string(j.UID))
	if err != nil {
		t.Fatal(err)
	}
	if row.ArchiveState != record.ArchiveReleased || !strings.Contains(row.ReleaseReason, "out of the archiver's view") {
		t.Errorf("job row %s (%q), want released for the hidden pod's log", row.ArchiveState, row.ReleaseReason)
	}
	pod, err := rig.Records.Pod(t.Context(), string(hidden.UID))
	if err != nil || pod.JobUID != string(j.UID) || pod.ArchiveState != record.ArchiveReleased || !strings.Contains(pod.ReleaseReason, tracking.JobPodLabel) {
		t.Errorf("pod %s row %+v (%v), want released under job %s, naming the removed label", hidden.Name, pod, err, j.UID)
	}
	waitFinalizerGone(t, rig, hidden.Name, time.Minute)
}

// tenantsRig is an archiver for the namespaces (not started) with the webhook registered for them.
func tenantsRig(t *testing.T, env *testbed.Env, namespaces ...string) *stack.Rig {
	t.Helper()
	stack.ServeWebhook(t, env).Register(t, env, namespaces, nil)
	a := stack.NewArchiver(t, env, testbed.Postgres(t), stack.Options{Backend: objstore.BackendFS, FSRoot: t.TempDir(), Namespaces: namespaces})
	records, err := db.Open(context.Background(), a.DSN, db.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { records.Close() })
	return &stack.Rig{Archiver: a, NS: namespaces[0], Records: records, Store: a.Store(t)}
}

// tenantPod is a pod of the tenant's, bound to node, running until deleted.
func tenantPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
}

// forgedRef is a controlling reference to victim, a VcJob of another namespace, as a tenant in ns
// writes it: a name that climbs from ns's directory into the victim's, and the victim's UID.
func forgedRef(ns string, victim *batchv1alpha1.Job) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: batchv1alpha1.SchemeGroupVersion.String(), Kind: "Job",
		Name: "../" + victim.Namespace + "/" + victim.Name, UID: victim.UID, Controller: ptr.To(true)}
}

// expectPodEvent asserts that an Event of reason whose message holds want was recorded for the
// pod within 30 s (the recorder sends them asynchronously).
func expectPodEvent(t *testing.T, env *testbed.Env, pod *corev1.Pod, reason, want string) {
	t.Helper()
	var seen []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var events corev1.EventList
		if err := env.Client.List(t.Context(), &events, client.InNamespace(pod.Namespace)); err != nil {
			t.Fatal(err)
		}
		seen = seen[:0]
		for _, e := range events.Items {
			if e.InvolvedObject.Name != pod.Name {
				continue
			}
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, want) {
				return
			}
		}
	}
	t.Errorf("no %s event saying %q for pod %s within 30 s (its events: %q)", reason, want, pod.Name, seen)
}

// archiveSnapshot is what the records and the store hold of a job.
type archiveSnapshot struct {
	State        record.ArchiveState
	Pods         []string // recorded pods' names
	Logs         []string // log rows: key and sha256
	ManifestPods []string
	Manifest     string
	Keys         []string // every object under the job's folder, with its size
}

func snapshotArchive(t *testing.T, rig *stack.Rig, job *batchv1alpha1.Job) archiveSnapshot {
	t.Helper()
	ctx := t.Context()
	var s archiveSnapshot
	row, err := rig.Records.Job(ctx, string(job.UID))
	if err != nil {
		t.Fatal(err)
	}
	s.State = row.ArchiveState
	pods, err := rig.Records.Pods(ctx, string(job.UID))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		s.Pods = append(s.Pods, p.Name)
	}
	logs, err := rig.Records.LogObjects(ctx, string(job.UID))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		s.Logs = append(s.Logs, l.ObjectKey+" "+l.SHA256)
	}
	dir := "archive/" + job.Namespace + "/" + job.Name + "/" + string(job.UID) + "/"
	if err := rig.Store.List(ctx, dir, func(o objstore.ObjectInfo) error {
		s.Keys = append(s.Keys, fmt.Sprintf("%s %d", o.Key, o.Size))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var m struct {
		Pods []struct {
			Name string `json:"name"`
		} `json:"pods"`
	}
	rc, err := rig.Store.Get(ctx, dir+"manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("manifest of %s: %v", job.Name, err)
	}
	s.Manifest = string(raw)
	for _, p := range m.Pods {
		s.ManifestPods = append(s.ManifestPods, p.Name)
	}
	return s
}
