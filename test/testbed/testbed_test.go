package testbed_test

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"google.golang.org/api/option"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// sampleLogs covers what a log archive must keep byte-exact: several lines, both streams
// interleaved, non-ASCII text, a line longer than 64 KiB and a last line without newline.
func sampleLogs(tag string) []testbed.Chunk {
	long := strings.Repeat("0123456789abcdef", 5000) // 80,000 bytes on one line
	return []testbed.Chunk{
		{Stream: "stdout", Data: []byte("starting " + tag + "\nline two\n")},
		{Stream: "stderr", Data: []byte("warning: ünïcödé ✓ 日本語\n")},
		{Stream: "stdout", Data: []byte(long + "\n\n")},
		{Stream: "stderr", Data: []byte("done without newline")},
	}
}

func TestVolcanoJobRunsAndServesLogs(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	ctx := t.Context()
	ns := env.Namespace(t)
	job := testbed.Job(ns, "selftest").Task("ps", 1, []string{"main"}).Task("worker", 1, []string{"main"}).Obj()

	want := map[string][]byte{}
	for _, task := range []string{"ps", "worker"} {
		pod := testbed.PodName(job.Name, task, 0)
		chunks := sampleLogs(pod)
		env.SetPodLogs(t, ns, pod, map[string]testbed.ContainerLogs{"main": {Current: chunks}})
		want[pod] = testbed.Bytes(chunks)
	}
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}

	phases := waitForPhase(t, env.Client, job, batchv1alpha1.Completed, 2*time.Minute)
	for _, p := range []batchv1alpha1.JobPhase{batchv1alpha1.Pending, batchv1alpha1.Running, batchv1alpha1.Completed} {
		if !contains(phases, p) {
			t.Errorf("job went through %v, want %s among them", phases, p)
		}
	}

	cs := clientset(t, env)
	for pod, w := range want {
		var p corev1.Pod
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, &p); err != nil {
			t.Fatalf("pod %s: %v", pod, err)
		}
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s phase %s, want Succeeded", pod, p.Status.Phase)
		}
		rc, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "main"}).Stream(ctx)
		if err != nil {
			t.Fatalf("logs of %s: %v", pod, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, w) {
			t.Errorf("logs of %s: got %d bytes, want %d bytes exactly as prepared (first diff at %d)", pod, len(got), len(w), firstDiff(got, w))
		}
	}
}

// Volcano's admission webhook runs as in every installation: it defaults what testbed.Job leaves
// unset (queue, scheduler, minAvailable) and refuses spec changes to a running job, but not
// metadata changes. A namespace labelled off is left out of it.
func TestVolcanoWebhookDefaultsAndGuardsJobs(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	ctx := t.Context()
	ns := env.Namespace(t)
	job := testbed.Job(ns, "defaults").Task("ps", 1, []string{"main"}).Task("worker", 2, []string{"main"}, testbed.RunsFor("30s")).Obj()
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	if job.Spec.Queue != "default" || job.Spec.SchedulerName != "volcano" || job.Spec.MinAvailable != 3 {
		t.Errorf("queue %q scheduler %q minAvailable %d, want Volcano's defaults default, volcano and 3",
			job.Spec.Queue, job.Spec.SchedulerName, job.Spec.MinAvailable)
	}
	waitForPhase(t, env.Client, job, batchv1alpha1.Running, time.Minute)

	spec := job.DeepCopy()
	spec.Spec.Tasks[0].Template.Labels = map[string]string{"added": "later"}
	if err := env.Client.Patch(ctx, spec, client.MergeFrom(job)); err == nil || !strings.Contains(err.Error(), "job updates may not change fields") {
		t.Errorf("patch of a running job's pod template: %v, want Volcano's refusal", err)
	}
	meta := job.DeepCopy()
	meta.Annotations = map[string]string{"note": "metadata is not spec"}
	if err := env.Client.Patch(ctx, meta, client.MergeFrom(job)); err != nil {
		t.Errorf("patch of a running job's annotations: %v, want it accepted", err)
	}

	off := testbed.Job(env.NamespaceWithoutVolcanoAdmission(t), "unseen").Task("main", 1, []string{"main"}).Obj()
	off.Spec.Queue = "no-such-queue"
	if err := env.Client.Create(ctx, off, client.DryRunAll); err != nil || off.Spec.SchedulerName != "" {
		t.Errorf("VcJob in a namespace without Volcano's admission: %v, scheduler %q; want admitted as it is", err, off.Spec.SchedulerName)
	}
}

// waitForPhase polls the job until it reaches phase and returns every phase it was seen in, from
// the live status and from Volcano's condition history.
func waitForPhase(t *testing.T, c client.Client, job *batchv1alpha1.Job, phase batchv1alpha1.JobPhase, timeout time.Duration) []batchv1alpha1.JobPhase {
	t.Helper()
	var seen []batchv1alpha1.JobPhase
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var j batchv1alpha1.Job
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(job), &j); err != nil {
			t.Fatal(err)
		}
		for _, cond := range j.Status.Conditions {
			if !contains(seen, cond.Status) {
				seen = append(seen, cond.Status)
			}
		}
		if !contains(seen, j.Status.State.Phase) && j.Status.State.Phase != "" {
			seen = append(seen, j.Status.State.Phase)
		}
		if j.Status.State.Phase == phase {
			return seen
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("job %s/%s did not reach %s in %s; phases seen %v", job.Namespace, job.Name, phase, timeout, seen)
	return nil
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestMinIOStoresObjects(t *testing.T) {
	s3 := testbed.MinIO(t)
	c, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	body := []byte("hello minio ✓")
	if _, err := c.PutObject(ctx, s3.Bucket, "dir/hello.txt", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, s3.Bucket, "dir/hello.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %q, %v; want %q", got, err, body)
	}
}

func TestGCSEmulatorStoresObjects(t *testing.T) {
	g := testbed.GCS(t)
	t.Setenv("STORAGE_EMULATOR_HOST", g.Host)
	ctx := t.Context()
	c, err := storage.NewClient(ctx, option.WithoutAuthentication(), storage.WithJSONReads())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := []byte("hello gcs ✓")
	w := c.Bucket(g.Bucket).Object("dir/hello.txt").NewWriter(ctx)
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := c.Bucket(g.Bucket).Object("dir/hello.txt").NewReader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %q, %v; want %q", got, err, body)
	}
}

func TestPostgresStoresRows(t *testing.T) {
	db, err := sql.Open("postgres", testbed.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id int PRIMARY KEY, v text)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t VALUES (1, 'ünïcödé')`); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := db.QueryRow(`SELECT v FROM t WHERE id = 1`).Scan(&v); err != nil || v != "ünïcödé" {
		t.Fatalf("got %q, %v", v, err)
	}
}

func TestEncodeCRIRoundTripsThroughKubeletFormat(t *testing.T) {
	// A unit check of the encoder; the end-to-end proof is TestVolcanoJobRunsAndServesLogs.
	out := testbed.EncodeCRI([]testbed.Chunk{{Stream: "stdout", Data: []byte("a\nb")}}, time.Unix(0, 0))
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], " stdout F a") || !strings.HasSuffix(lines[1], " stdout P b") {
		t.Fatalf("unexpected encoding:\n%s", out)
	}
}

// criRecords splits the CRI-format file content into its records' timestamp, stream, tag and text.
func criRecords(t *testing.T, out []byte) [][4]string {
	t.Helper()
	var recs [][4]string
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			t.Fatalf("not a CRI record: %q", line)
		}
		recs = append(recs, [4]string{f[0], f[1], f[2], f[3]})
	}
	return recs
}

// TestEncodeCRIStampsOutOfOrder: a chunk stamped with its own Time, or off the runtime's clock by
// TimeOffset, is written in write order with that time, as containerd writes stdout and stderr
// stamped in separate goroutines before its write lock, and as a node clock stepped back does.
func TestEncodeCRIStampsOutOfOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	us := time.Microsecond
	out := testbed.EncodeCRI([]testbed.Chunk{
		{Stream: "stdout", Data: []byte("two\n"), Time: t0.Add(2 * us)},
		{Stream: "stderr", Data: []byte("one\n"), Time: t0.Add(us)},
		{Stream: "stdout", Data: []byte("three\n"), Time: t0.Add(3 * us)},
		{Stream: "stdout", Data: []byte("clock\n")},
		{Stream: "stderr", Data: []byte("stepped back\nstill back\n"), TimeOffset: -time.Second},
		{Stream: "stdout", Data: []byte("clock again\n")},
	}, t0.Add(time.Minute))
	want := [][4]string{
		{"2026-01-02T03:04:05.000002Z", "stdout", "F", "two"},
		{"2026-01-02T03:04:05.000001Z", "stderr", "F", "one"},
		{"2026-01-02T03:04:05.000003Z", "stdout", "F", "three"},
		// The runtime's own clock goes on where it was, a microsecond per record.
		{"2026-01-02T03:05:05.000004Z", "stdout", "F", "clock"},
		{"2026-01-02T03:05:04.000005Z", "stderr", "F", "stepped back"},
		{"2026-01-02T03:05:04.000006Z", "stderr", "F", "still back"},
		{"2026-01-02T03:05:05.000007Z", "stdout", "F", "clock again"},
	}
	if got := criRecords(t, out); !slices.Equal(got, want) {
		t.Errorf("records:\n%q\nwant\n%q", got, want)
	}
}

// TestEncodeCRISplitsLongLines: a line longer than 16 KiB is written as containerd writes it,
// partial (P) records of 16 KiB and a full (F) record with the rest; a last fragment without
// newline is a partial record.
func TestEncodeCRISplitsLongLines(t *testing.T) {
	line := bytes.Repeat([]byte("0123456789abcdef"), 2*1024+10) // 32 KiB + 160 bytes
	out := testbed.EncodeCRI([]testbed.Chunk{{Stream: "stdout", Data: append(append([]byte{}, line...), "\nend"...)}}, time.Unix(0, 0))
	recs := criRecords(t, out)
	var tags []string
	var text string
	for _, r := range recs {
		tags = append(tags, r[2]+":"+strconv.Itoa(len(r[3])))
		text += r[3]
		if r[2] == "F" {
			text += "\n"
		}
	}
	if want := []string{"P:16384", "P:16384", "F:160", "P:3"}; !slices.Equal(tags, want) {
		t.Errorf("records (tag:length) %v, want %v", tags, want)
	}
	if text != string(line)+"\nend" {
		t.Errorf("the records' text is not the line written")
	}
}
