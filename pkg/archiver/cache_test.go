package archiver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/shard"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// fullPod is a pod of a VcJob as the API server serves it, with everything a real one carries.
func fullPod(jobUID types.UID, deleting bool) *corev1.Pod {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	t1 := metav1.NewTime(time.Unix(1060, 0))
	big := strings.Repeat("m", 4096)
	ctr := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "registry.example.com/team/" + name + ":v1", Command: []string{"/bin/run", "--long-flag"},
			Env:          []corev1.EnvVar{{Name: "TOKEN", Value: "secret"}, {Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Resources:    corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "j-w-0", Namespace: "ns", UID: "pod-uid", ResourceVersion: "42", CreationTimestamp: t0,
			Labels:          map[string]string{tracking.JobPodLabel: "j", volcanoTaskLabel: "w", "volcano.sh/job-namespace": "ns"},
			Annotations:     map[string]string{tracking.ReleaseAnnotation: "ticket-1", "scheduling.k8s.io/group-name": "j-pg", "kubectl.kubernetes.io/last-applied-configuration": big},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch.volcano.sh/v1alpha1", Kind: "Job", Name: "j", UID: jobUID, Controller: ptr.To(true)}},
			Finalizers:      []string{tracking.PodFinalizer},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "vc-controller-manager", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}},
		Spec: corev1.PodSpec{NodeName: "node-1", InitContainers: []corev1.Container{ctr("init")}, Containers: []corev1.Container{ctr("app"), ctr("side")},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}},
			Volumes:             []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Tolerations:         []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}, TerminationGracePeriodSeconds: ptr.To[int64](30)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t0, HostIP: "10.0.0.1", PodIP: "10.1.0.1",
			Conditions:            []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", Image: "x", ImageID: "sha256:abc", ContainerID: "containerd://1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, StartedAt: t0, FinishedAt: t0, Message: big}}}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t1}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: t1, Message: big}}},
				{Name: "side", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, FinishedAt: t1}}}},
			EphemeralContainerStatuses: []corev1.ContainerStatus{{Name: "debug", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: big}}}},
		},
	}
	if deleting {
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &t1, ptr.To[int64](30)
	}
	return p
}

// podReads is everything the pod and job reconcilers, the captures and the sweep read of a pod.
// A reader added to them must be added here, or the cache transform may strip what it reads.
func podReads(p *corev1.Pod) map[string]any {
	job, isJobs := ownerJob(p)
	reads := map[string]any{
		"key": p.Namespace + "/" + p.Name, "uid": p.UID, "resourceVersion": p.ResourceVersion, "created": p.CreationTimestamp,
		"deleting": p.DeletionTimestamp, "finalizers": p.Finalizers, "release": releaseReason(p), "ownerJob": job, "isJobs": isJobs,
		"task": p.Labels[volcanoTaskLabel], "labels": p.Labels, "node": p.Spec.NodeName, "phase": p.Status.Phase, "started": p.Status.StartTime,
		"ended": podEnded(p), "lastFinish": lastFinish(p), "allTerminated": allTerminated(p), "orphaning": p.Labels[tracking.JobPodLabel],
	}
	for _, cr := range podRuns(p) {
		reads["run/"+cr.container+"/"+cr.instance] = cr
	}
	for _, s := range statuses(p) {
		var ended, lastEnded *time.Time
		if t := s.State.Terminated; t != nil {
			ended = &t.FinishedAt.Time
		}
		if t := s.LastTerminationState.Terminated; t != nil {
			lastEnded = &t.FinishedAt.Time
		}
		reads["status/"+s.Name] = []any{s.RestartCount, s.State.Running != nil, ended, lastEnded}
	}
	for _, k := range []string{tracking.ArchivedAtAnnotation, tracking.ReleaseAnnotation} {
		reads["annotation/"+k] = p.Annotations[k]
	}
	return reads
}

func TestPodTransform(t *testing.T) {
	o := DefaultOptions()
	for _, deleting := range []bool{false, true} {
		full := fullPod("job-uid", deleting)
		got, err := o.podTransform(full.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		cut := got.(*corev1.Pod)
		if diff := cmp.Diff(podReads(full), podReads(cut), cmp.AllowUnexported(containerRun{}, archive.JobRef{})); diff != "" {
			t.Errorf("deleting %v: what the archiver reads changed (-full +cached):\n%s", deleting, diff)
		}
		again, _ := o.podTransform(cut.DeepCopy())
		if diff := cmp.Diff(cut, again); diff != "" {
			t.Errorf("transform not idempotent (-once +twice):\n%s", diff)
		}
		fullJSON, _ := json.Marshal(full)
		cutJSON, _ := json.Marshal(cut)
		if len(cutJSON)*4 > len(fullJSON) {
			t.Errorf("cached pod is %d bytes of JSON against %d whole: want less than a quarter", len(cutJSON), len(fullJSON))
		}
		if strings.Contains(string(cutJSON), "secret") || cut.Spec.Volumes != nil || cut.Status.Conditions != nil {
			t.Errorf("cached pod kept what is never read: %s", cutJSON)
		}
	}
}

// TestTransformOtherShard: the objects of another shard (or an excluded namespace) keep only
// their identity, and the shard filter lets none of their events through.
func TestTransformOtherShard(t *testing.T) {
	const total = 3
	jobUID := types.UID("job-uid")
	mine := shard.Of(jobUID, total)
	for i := range total {
		o := DefaultOptions()
		o.Shard = shard.Shard{Index: i, Total: total}
		pod, _ := o.podTransform(fullPod(jobUID, false))
		job, _ := o.jobTransform(fullJob(jobUID))
		p, j := pod.(*corev1.Pod), job.(*batchv1alpha1.Job)
		owned := i == mine
		if got := len(p.Spec.Containers) > 0 && len(j.Spec.Tasks) > 0; got != owned {
			t.Errorf("shard %d of %d (job's shard %d): pod and job kept whole %v, want %v", i, total, mine, got, owned)
		}
		if p.UID == "" || p.OwnerReferences == nil || j.UID == "" {
			t.Errorf("shard %d: identity stripped: pod %+v job %+v", i, p.ObjectMeta, j.ObjectMeta)
		}
		f := o.shardFilter()
		if f.Generic(genericEvent(p)) != owned || f.Generic(genericEvent(j)) != owned {
			t.Errorf("shard %d: filter passes the job's events %v, want %v", i, !owned, owned)
		}
		orphan := fullPod(jobUID, false)
		orphan.OwnerReferences = nil
		if !f.Generic(genericEvent(orphan)) {
			t.Errorf("shard %d: an orphaned pod must reach Reconcile, which decides by its record", i)
		}
	}
	o := DefaultOptions()
	pod := fullPod(jobUID, false)
	pod.Namespace = o.ExcludeNamespaces[0]
	if got, _ := o.podTransform(pod); got.(*corev1.Pod).Spec.Containers != nil {
		t.Error("a pod of an excluded namespace was cached whole")
	}
}

func fullJob(uid types.UID) *batchv1alpha1.Job {
	pod := fullPod(uid, false)
	return &batchv1alpha1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: uid, ResourceVersion: "7",
			Annotations:   map[string]string{tracking.SubmitterAnnotation: "alice", corev1.LastAppliedConfigAnnotation: `{"env":"secret"}`},
			Finalizers:    []string{tracking.JobFinalizer},
			ManagedFields: pod.ManagedFields},
		Spec: batchv1alpha1.JobSpec{Queue: "default", Tasks: []batchv1alpha1.TaskSpec{{Name: "w", Replicas: 2,
			Template: corev1.PodTemplateSpec{Spec: pod.Spec}}}},
		Status: batchv1alpha1.JobStatus{State: batchv1alpha1.JobState{Phase: batchv1alpha1.Running}},
	}
}

// TestJobTransformKeepsRecord: job.json and the row are made from the cached job; they must be
// byte for byte what they are made from the job as served, with and without redaction.
func TestJobTransformKeepsRecord(t *testing.T) {
	for _, redact := range []bool{true, false} {
		o := DefaultOptions()
		o.Redact = redact
		full := fullJob("job-uid")
		cached, err := o.jobTransform(full.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(o.recordable(full))
		got, _ := json.Marshal(o.recordable(cached.(*batchv1alpha1.Job)))
		if string(got) != string(want) {
			t.Errorf("redact %v: recorded job differs when made from the cache:\n got %s\nwant %s", redact, got, want)
		}
		if cached.(*batchv1alpha1.Job).ManagedFields != nil {
			t.Errorf("redact %v: managedFields cached", redact)
		}
	}
}

func genericEvent(obj client.Object) event.GenericEvent { return event.GenericEvent{Object: obj} }

// listPages reads an informer's list in pages, transforming each as it arrives: the first page is
// asked for at the latest version (not "0", which the API server would answer whole), each next
// one by its continue token alone, and the result carries the first page's resourceVersion.
func TestListPages(t *testing.T) {
	pages := []*corev1.PodList{
		{ListMeta: metav1.ListMeta{ResourceVersion: "100", Continue: "c1"}, Items: []corev1.Pod{*fullPod("job-uid", false), *fullPod("job-uid", false)}},
		{ListMeta: metav1.ListMeta{ResourceVersion: "100", Continue: "c2"}, Items: []corev1.Pod{*fullPod("job-uid", false)}},
		{ListMeta: metav1.ListMeta{ResourceVersion: "100"}, Items: []corev1.Pod{*fullPod("job-uid", true)}},
	}
	var asked []metav1.ListOptions
	lw := &toolscache.ListWatch{ListWithContextFunc: func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		asked = append(asked, opts)
		return pages[len(asked)-1].DeepCopy(), nil
	}}
	o := DefaultOptions()
	list, err := listPages(t.Context(), lw, metav1.ListOptions{ResourceVersion: "0", LabelSelector: "a=b"}, o.podTransform)
	if err != nil {
		t.Fatal(err)
	}
	want := []metav1.ListOptions{
		{LabelSelector: "a=b", Limit: listPageSize},
		{LabelSelector: "a=b", Limit: listPageSize, Continue: "c1"},
		{LabelSelector: "a=b", Limit: listPageSize, Continue: "c2"},
	}
	if diff := cmp.Diff(want, asked); diff != "" {
		t.Errorf("list options (-want +got):\n%s", diff)
	}
	m, err := meta.ListAccessor(list)
	if err != nil || m.GetResourceVersion() != "100" || m.GetContinue() != "" {
		t.Errorf("list meta: resourceVersion %q, continue %q, err %v; want 100, none", m.GetResourceVersion(), m.GetContinue(), err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 {
		t.Fatalf("%d items, want 4", len(items))
	}
	for i, item := range items {
		pod := item.(*corev1.Pod)
		again, _ := o.podTransform(pod.DeepCopy())
		if pod.Spec.Containers[0].Image != "" || pod.ManagedFields != nil {
			t.Errorf("item %d not transformed: %+v", i, pod)
		}
		if diff := cmp.Diff(pod, again); diff != "" {
			t.Errorf("item %d: the transform applied again changes it (-once +twice):\n%s", i, diff)
		}
	}
	if items[3].(*corev1.Pod).DeletionTimestamp == nil {
		t.Errorf("items out of order: the last page's pod is not last")
	}

	// An error of any page is the list's: the informer retries it whole.
	asked = nil
	lw.ListWithContextFunc = func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		asked = append(asked, opts)
		if len(asked) == 2 {
			return nil, apierrors.NewResourceExpired("continue token expired")
		}
		return pages[0].DeepCopy(), nil
	}
	if _, err := listPages(t.Context(), lw, metav1.ListOptions{}, o.podTransform); !apierrors.IsResourceExpired(err) {
		t.Errorf("listPages with an expired continue token: %v, want the Expired error", err)
	}
}
