package chaos

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Case 6: with MinIO down, then with Postgres down, jobs finish; nothing is released early, and
// after recovery everything is archived once.
func TestBackendOutages(t *testing.T) {
	outages := map[string]struct{ stop, start func(t *testing.T) }{
		"minio": {
			stop:  func(t *testing.T) { testbed.MinIOInstance(t).Stop() },
			start: func(t *testing.T) { testbed.MinIOInstance(t).Start(t) },
		},
		"postgres": {
			stop:  func(t *testing.T) { testbed.PostgresCluster(t).Stop() },
			start: func(t *testing.T) { testbed.PostgresCluster(t).Start(t) },
		},
	}
	for _, name := range []string{"minio", "postgres"} {
		o := outages[name]
		t.Run(name, func(t *testing.T) {
			s := stack.NewRig(t, objstore.BackendS3)
			job := testbed.Job(s.NS, "outage").Task("worker", 2, []string{"main"}).Obj()
			want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 2}, []string{"main"}, false)
			o.stop(t)
			up := false
			t.Cleanup(func() {
				if !up {
					o.start(t)
				}
			})
			stack.CreateAs(t, s.Env, "henry", job)
			j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Completed, 2*time.Minute)
			time.Sleep(5 * time.Second) // the archiver retries meanwhile
			assertHeld(t, s, j)
			o.start(t)
			up = true
			j = s.WaitArchived(t, j, 3*time.Minute)
			if logs := s.CheckJobArchive(t, j, want); len(logs) != 2 {
				t.Errorf("%d log rows, want 2", len(logs))
			}
		})
	}
}

// assertHeld checks that the job and its pods still hold their finalizers.
func assertHeld(t *testing.T, s *stack.Rig, job *batchv1alpha1.Job) {
	t.Helper()
	j := stack.GetJob(t, s.Env, job)
	if !controllerutil.ContainsFinalizer(j, tracking.JobFinalizer) {
		t.Fatalf("job released while a backend was down")
	}
	pods := jobPods(t, s, j)
	if len(pods) == 0 {
		t.Fatalf("no pods left while a backend was down")
	}
	for _, p := range pods {
		if !controllerutil.ContainsFinalizer(&p, tracking.PodFinalizer) {
			t.Fatalf("pod %s released while a backend was down", p.Name)
		}
	}
}

// Case 7: the archiver is killed (SIGKILL) in the middle of an upload and restarted: the archive
// completes, without duplicate rows and without objects under other keys.
func TestArchiverKilledMidUpload(t *testing.T) {
	s := stack.NewRig(t, objstore.BackendS3)
	job := testbed.Job(s.NS, "killed").Task("worker", 1, []string{"main"}).Obj()
	pod := testbed.PodName(job.Name, "worker", 0)
	// Large enough that the upload takes seconds (16 MiB parts: many of them).
	line := strings.Repeat("the quick brown fox jumps over the lazy dog ", 20) + "\n"
	big := bytes.Repeat([]byte(line), (256<<20)/len(line))
	want := map[string]map[string]testbed.ContainerLogs{pod: {"main": {Current: []testbed.Chunk{{Stream: "stdout", Data: big}}}}}
	s.Env.SetPodLogs(t, s.NS, pod, want[pod])

	m := testbed.MinIOInstance(t)
	mc, err := m.Client()
	if err != nil {
		t.Fatal(err)
	}
	bucket := stack.ArgValue(s.Args, "--store-s3-bucket=")
	stack.CreateAs(t, s.Env, "ivan", job)

	// Kill the archiver as soon as a multipart upload is in flight.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if inFlight(t.Context(), mc, bucket) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no upload seen in flight; archiver log: %s", s.Proc.LogPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Proc.Kill()
	if j := stack.GetJob(t, s.Env, job); !controllerutil.ContainsFinalizer(j, tracking.JobFinalizer) {
		t.Fatalf("job released although its upload was killed")
	}
	s.Start(t)
	j := s.WaitArchived(t, job, 3*time.Minute)
	logs := s.CheckJobArchive(t, j, want)
	if len(logs) != 1 {
		t.Errorf("%d log rows, want 1", len(logs))
	}
	// Every object under the job's prefix is one the database and manifest name.
	var keys []string
	if err := s.Store.List(t.Context(), "archive/", func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	dir := "archive/" + j.Namespace + "/" + j.Name + "/" + string(j.UID) + "/"
	wantKeys := []string{dir + "job.json", dir + "manifest.json", logs[0].ObjectKey}
	sort.Strings(wantKeys)
	if strings.Join(keys, "\n") != strings.Join(wantKeys, "\n") {
		t.Errorf("objects in the bucket:\n%s\nwant exactly:\n%s", strings.Join(keys, "\n"), strings.Join(wantKeys, "\n"))
	}
	if logs[0].State != record.LogStored {
		t.Errorf("log %s: %s", logs[0], logs[0].State)
	}
}

func inFlight(ctx context.Context, mc *minio.Client, bucket string) bool {
	for u := range mc.ListIncompleteUploads(ctx, bucket, "", true) {
		if u.Err == nil {
			return true
		}
	}
	return false
}

func jobPods(t *testing.T, s *stack.Rig, job *batchv1alpha1.Job) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := s.Env.Client.List(t.Context(), &pods, client.InNamespace(job.Namespace)); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}
