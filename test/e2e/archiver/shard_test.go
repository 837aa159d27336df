package archiver

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archiver"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/shard"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Issue 13, item 6: three archivers, --shard 0 to 2 of --total-shards=3, each electing its own
// leader (with config/overlays/sharded's lease permissions), share one database and store. Shard
// 1 is killed before the jobs are submitted: the jobs of shards 0 and 2 are archived meanwhile,
// shard 1's wait with their finalizers; restarted, it archives them. In the end every job is
// archived exactly once: one row, each transition and log once, one Archived Event, and each
// shard counted exactly the jobs whose UID hashes to it.
func TestShardsArchiveTheirJobsOnly(t *testing.T) {
	t.Parallel()
	const total = 3
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	stack.Webhook(t, env)
	grantShardLeases(t, env, ns)
	dsn, root := testbed.Postgres(t), t.TempDir()
	shards := make([]*stack.Archiver, total)
	for i := range shards {
		shards[i] = stack.NewArchiver(t, env, dsn, stack.Options{FSRoot: root, Namespaces: []string{ns},
			Flags: []string{fmt.Sprintf("--shard=%d", i), fmt.Sprintf("--total-shards=%d", total),
				"--leader-elect=true", "--leader-election-namespace=" + ns}})
		shards[i].Start(t)
	}
	const down = 1
	shards[down].Proc.Kill()

	// Submit jobs until every shard has two (UIDs are known only once created).
	type submitted struct {
		job   *batchv1alpha1.Job
		want  map[string]map[string]testbed.ContainerLogs
		shard int
	}
	var jobs []submitted
	per := make([]int, total)
	for i := 0; min(per[0], per[1], per[2]) < 2; i++ {
		if i == 30 {
			t.Fatalf("30 jobs and still a shard with fewer than 2: %v", per)
		}
		job := testbed.Job(ns, fmt.Sprintf("s-%02d", i)).Task("w", 1, []string{"main"}).Obj()
		want := stack.PodLogs(t, env, ns, job.Name, map[string]int{"w": 1}, []string{"main"}, false)
		stack.CreateAs(t, env, "alice", job)
		sh := shard.Of(job.UID, total)
		per[sh]++
		jobs = append(jobs, submitted{job, want, sh})
	}
	t.Logf("jobs per shard: %v", per)

	rig := &stack.Rig{Archiver: shards[0], NS: ns, Store: shards[0].Store(t)}
	var err error
	if rig.Records, err = db.Open(t.Context(), dsn, db.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rig.Records.Close() })

	// The live shards archive their jobs while shard 1 is down.
	for _, s := range jobs {
		if s.shard != down {
			rig.Archiver = shards[s.shard]
			rig.WaitArchived(t, s.job, 2*time.Minute)
		}
	}
	// Shard 1's jobs are done but held, and their pods too, nothing of them archived.
	for _, s := range jobs {
		if s.shard != down {
			continue
		}
		j := stack.WaitPhase(t, env, s.job, batchv1alpha1.Completed, time.Minute)
		if !controllerutil.ContainsFinalizer(j, tracking.JobFinalizer) || j.Annotations[tracking.ArchivedAtAnnotation] != "" {
			t.Errorf("job %s of the down shard was finalized by another shard: finalizers %v, annotations %v", j.Name, j.Finalizers, j.Annotations)
		}
		var pods corev1.PodList
		if err := env.Client.List(t.Context(), &pods, client.InNamespace(ns), client.MatchingLabels{tracking.JobPodLabel: j.Name}); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if !controllerutil.ContainsFinalizer(&p, tracking.PodFinalizer) {
				t.Errorf("pod %s of the down shard's job %s was released by another shard", p.Name, j.Name)
			}
		}
		if row, err := rig.Records.Job(t.Context(), string(j.UID)); err == nil {
			t.Errorf("job %s of the down shard was recorded by another shard (%s)", j.Name, row.ArchiveState)
		}
	}

	shards[down].Start(t)
	for _, s := range jobs {
		rig.Archiver = shards[s.shard]
		j := rig.WaitArchived(t, s.job, 2*time.Minute)
		rig.CheckJobArchive(t, j, s.want)
		checkArchivedOnce(t, env, j)
	}

	// Each shard archived exactly its own jobs and their pods, and held its own lease.
	for i, a := range shards {
		m := a.Metrics(t)
		for _, name := range []string{"jobvault_archiver_jobs_archived_total", "jobvault_archiver_pods_archived_total"} {
			if got, want := metricValue(t, m, name), per[i]; got != float64(want) {
				t.Errorf("shard %d: %s = %v, want %d (the jobs whose UID hashes to it, one pod each)", i, name, got, want)
			}
		}
		var lease coordinationv1.Lease
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: archiver.LeaderElectionID(shard.Shard{Index: i, Total: total})}, &lease); err != nil {
			t.Errorf("shard %d's lease: %v", i, err)
		} else if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Errorf("shard %d's lease %s has no holder", i, lease.Name)
		}
	}
}

// checkArchivedOnce: one Archived Event for the job, however many archivers saw it. The recorder
// sends Events asynchronously, after the release the caller waited for, so the first may still
// be on its way: wait up to 30 s for one, then count.
func checkArchivedOnce(t *testing.T, env *testbed.Env, job *batchv1alpha1.Job) {
	t.Helper()
	var n int32
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var events corev1.EventList
		if err := env.Client.List(t.Context(), &events, client.InNamespace(job.Namespace)); err != nil {
			t.Fatal(err)
		}
		n = 0
		for _, e := range events.Items {
			if e.InvolvedObject.UID == job.UID && e.Reason == "Archived" {
				n += max(e.Count, 1)
			}
		}
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	if n != 1 {
		t.Errorf("job %s: %d Archived Events, want 1", job.Name, n)
	}
}

// metricValue is the sum of a counter's series in a /metrics exposition, 0 if absent.
func metricValue(t *testing.T, exposition, name string) float64 {
	t.Helper()
	return seriesSum(t, exposition, name+" ") + seriesSum(t, exposition, name+"{")
}

// seriesSum is the sum of the series in a /metrics exposition whose line starts with prefix (a
// name and some of its labels, say), 0 if none.
func seriesSum(t *testing.T, exposition, prefix string) float64 {
	t.Helper()
	sum := 0.0
	for line := range strings.Lines(exposition) {
		if strings.HasPrefix(line, prefix) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(strings.TrimSpace(line), ' ')+1:], &v); err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// grantShardLeases gives the archivers' identity config/overlays/sharded's leader election Role in
// ns, so that the shards elect with exactly the permissions they ship with.
func grantShardLeases(t *testing.T, env *testbed.Env, ns string) {
	t.Helper()
	for _, o := range stack.Kustomize(t, "overlays/sharded") {
		if o.GetKind() != "Role" || !strings.Contains(o.GetName(), "leader-election") {
			continue
		}
		var role rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatal(err)
		}
		role.ObjectMeta = metav1.ObjectMeta{Name: role.Name, Namespace: ns}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: stack.ArchiverUser}}}
		for _, o := range []client.Object{&role, binding} {
			if err := env.Client.Create(t.Context(), o); err != nil {
				t.Fatalf("create %s: %v", o.GetName(), err)
			}
		}
		return
	}
	t.Fatal("config/overlays/sharded renders no leader election Role")
}
