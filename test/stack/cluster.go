package stack

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/testbed"
)

// PodLogs prepares distinct logs for every container of every pod Volcano will create for the
// tasks (name → replicas) and returns what each must read back as: pod → container → bytes.
func PodLogs(t testing.TB, env *testbed.Env, ns, job string, tasks map[string]int, containers []string, withPrevious bool) map[string]map[string]testbed.ContainerLogs {
	t.Helper()
	all := map[string]map[string]testbed.ContainerLogs{}
	for task, n := range tasks {
		for i := range n {
			pod := testbed.PodName(job, task, i)
			logs := map[string]testbed.ContainerLogs{}
			for _, c := range containers {
				cl := testbed.ContainerLogs{Current: SampleChunks(pod + "/" + c)}
				if withPrevious {
					cl.Previous = []testbed.Chunk{{Stream: "stderr", Data: []byte("previous run of " + pod + "/" + c + ": crashed ✗\n")}}
				}
				logs[c] = cl
			}
			env.SetPodLogs(t, ns, pod, logs)
			all[pod] = logs
		}
	}
	return all
}

// SampleChunks is a log of both streams, with non-ASCII text, a 70 kB line and no final newline,
// distinct for each tag.
func SampleChunks(tag string) []testbed.Chunk {
	return []testbed.Chunk{
		{Stream: "stdout", Data: []byte("hello from " + tag + "\nline 2 ✓ ünïcödé\n")},
		{Stream: "stderr", Data: []byte("warning on stderr\n" + strings.Repeat("x", 70_000) + "\n")},
		{Stream: "stdout", Data: []byte("last line without newline")},
	}
}

// SteadyOutput is n chunks of about size bytes each, lines of every kind a log holds: both streams,
// non-UTF-8 bytes, CRLF.
func SteadyOutput(tag string, n, size int) []testbed.Chunk {
	var out []testbed.Chunk
	for i := range n {
		var b bytes.Buffer
		for b.Len() < size {
			fmt.Fprintf(&b, "%s chunk %d at %d: %s\n", tag, i, b.Len(), strings.Repeat("=", 90))
		}
		stream := "stdout"
		if i%4 == 3 {
			stream = "stderr"
			b.WriteString("crlf line\r\n\xff\xfe binary\n")
		}
		out = append(out, testbed.Chunk{Stream: stream, Data: b.Bytes()})
	}
	return out
}

// CreateAs creates the job as the given user, so the webhook records that submitter.
func CreateAs(t testing.TB, env *testbed.Env, user string, job *batchv1alpha1.Job) {
	t.Helper()
	c, err := client.New(env.UserConfig(t, user, "team-a"), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), job); err != nil {
		t.Fatalf("create job as %s: %v", user, err)
	}
}

// GetJob reads the job as it is now.
func GetJob(t testing.TB, env *testbed.Env, job *batchv1alpha1.Job) *batchv1alpha1.Job {
	t.Helper()
	var j batchv1alpha1.Job
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &j); err != nil {
		t.Fatal(err)
	}
	return &j
}

// WaitPodsRunning waits until at least n of the pods opts select run.
func WaitPodsRunning(t testing.TB, env *testbed.Env, n int, timeout time.Duration, opts ...client.ListOption) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var pods corev1.PodList
		if err := env.Client.List(t.Context(), &pods, opts...); err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pods running after %s", running, n, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitPhase waits until the job is in phase and returns it as last seen.
func WaitPhase(t testing.TB, env *testbed.Env, job *batchv1alpha1.Job, phase batchv1alpha1.JobPhase, timeout time.Duration) *batchv1alpha1.Job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := GetJob(t, env, job)
		if j.Status.State.Phase == phase {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s/%s in phase %q after %s, want %s", job.Namespace, job.Name, j.Status.State.Phase, timeout, phase)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ReleaseNamespace removes jobvault's finalizers from every VcJob and pod in ns and deletes the
// VcJobs, until none is left holding one, so that the namespace can go. For namespaces where no
// archiver runs.
func ReleaseNamespace(tb testing.TB, env *testbed.Env, ns string) {
	tb.Helper()
	ctx := context.Background()
	strip := func(obj client.Object, finalizer string) error {
		if !slices.Contains(obj.GetFinalizers(), finalizer) {
			return nil
		}
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		obj.SetFinalizers(slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == finalizer }))
		return client.IgnoreNotFound(env.Client.Patch(ctx, obj, patch))
	}
	quiet := 0
	// Minutes, not seconds: a benchmark leaves thousands of jobs, patched and deleted at the
	// client's rate limit.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		held := 0
		var jobs batchv1alpha1.JobList
		if err := env.Client.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for i := range jobs.Items {
			job := &jobs.Items[i]
			if job.DeletionTimestamp == nil || slices.Contains(job.Finalizers, tracking.JobFinalizer) {
				held++
			}
			if err := strip(job, tracking.JobFinalizer); err != nil && !apierrors.IsConflict(err) {
				return false, err
			}
			if job.DeletionTimestamp == nil {
				if err := env.Client.Delete(ctx, job); client.IgnoreNotFound(err) != nil {
					return false, err
				}
			}
		}
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if slices.Contains(pod.Finalizers, tracking.PodFinalizer) {
				held++
				if err := strip(pod, tracking.PodFinalizer); err != nil && !apierrors.IsConflict(err) {
					return false, err
				}
			}
		}
		// Volcano may still create a pod right after its job went: want two quiet rounds.
		if held == 0 {
			quiet++
		} else {
			quiet = 0
		}
		return quiet >= 2, nil
	})
	if err != nil {
		tb.Errorf("release jobvault's finalizers in %s: %v", ns, err)
	}
}

// Unthrottled is a client without client-side rate limiting, for streams and latencies.
func Unthrottled(tb testing.TB, env *testbed.Env, cfg *rest.Config) client.Client {
	tb.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
