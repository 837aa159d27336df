package stack

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/testbed"
)

// Rig is one archiver process (the real binary) with its own namespace, database and store,
// behind the real webhook.
type Rig struct {
	*Archiver
	// NS is the rig's namespace; its archiver watches only this one.
	NS string
	// Records is the archiver's database.
	Records *db.DB
	// Store is the archiver's object store, opened for reading back what it wrote
	// (Archiver.Store).
	Store objstore.Store
}

// NewRig registers the webhook, makes a namespace, a database and a store of the given backend
// (s3 = MinIO, gcs = the GCS emulator, fs = a directory) and starts the archiver for them.
func NewRig(t testing.TB, backend string, flags ...string) *Rig {
	t.Helper()
	return newRig(t, testbed.Postgres(t), backend, flags, func(env *testbed.Env, _ string) { Webhook(t, env) })
}

// NewRigOn is NewRig with the archiver's database a new one on pg (testbed.NewPostgres), not on
// the shared server.
func NewRigOn(t testing.TB, pg *testbed.PostgresServer, backend string, flags ...string) *Rig {
	t.Helper()
	return newRig(t, pg.Database(t), backend, flags, func(env *testbed.Env, _ string) { Webhook(t, env) })
}

// NewScopedRig is NewRig with the webhook served in this process (ServeWebhook) and registered
// for the rig's namespace only, instead of the webhook binary registered cluster-wide: the other
// namespaces of the test process stay without a webhook, as while it is down. The archiver runs as
// ArchiverUser with config/archiver's ClusterRole, as in NewRig.
func NewScopedRig(t testing.TB, backend string, flags ...string) *Rig {
	t.Helper()
	return newRig(t, testbed.Postgres(t), backend, flags, func(env *testbed.Env, ns string) {
		ServeWebhook(t, env).Register(t, env, []string{ns}, nil)
	})
}

// newRig makes the rig's namespace, registers a webhook for it with register, and starts the
// archiver on the database at dsn, with its store.
func newRig(t testing.TB, dsn, backend string, flags []string, register func(env *testbed.Env, ns string)) *Rig {
	t.Helper()
	env := testbed.Cluster(t)
	s := &Rig{NS: env.Namespace(t)}
	register(env, s.NS)
	s.Archiver = NewArchiver(t, env, dsn, Options{Backend: backend, FSRoot: t.TempDir(),
		Namespaces: []string{s.NS}, Flags: flags})
	s.Store = s.Archiver.Store(t)
	s.Start(t)
	var err error
	if s.Records, err = db.Open(context.Background(), s.DSN, db.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Records.Close() })
	return s
}

// WaitArchived waits until the job's finalizer is released and returns the job as last seen.
func (s *Rig) WaitArchived(t testing.TB, job *batchv1alpha1.Job, timeout time.Duration) *batchv1alpha1.Job {
	t.Helper()
	var j batchv1alpha1.Job
	deadline := time.Now().Add(timeout)
	for {
		err := s.Env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &j)
		if err == nil && j.Annotations[tracking.ArchivedAtAnnotation] != "" && !controllerutil.ContainsFinalizer(&j, tracking.JobFinalizer) {
			return &j
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s/%s not archived within %s (phase %q, finalizers %v, err %v); archiver log: %s",
				job.Namespace, job.Name, timeout, j.Status.State.Phase, j.Finalizers, err, s.Proc.LogPath)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ReadLog reads an archived log object back, decompressed, with its sha256.
func (s *Rig) ReadLog(t testing.TB, key string) ([]byte, string) {
	t.Helper()
	rc, err := s.Store.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatalf("gunzip %s: %v", key, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// CheckLog asserts that the log object row is stored and its object holds exactly want.
func (s *Rig) CheckLog(t testing.TB, row record.LogObject, want []byte) {
	t.Helper()
	if row.State != record.LogStored {
		t.Errorf("log %s: state %s (%s), want stored", row, row.State, row.Reason)
		return
	}
	got, sum := s.ReadLog(t, row.ObjectKey)
	wantSum := sha256.Sum256(want)
	if !bytes.Equal(got, want) || sum != hex.EncodeToString(wantSum[:]) || row.SHA256 != sum || row.Bytes != int64(len(want)) {
		t.Errorf("log %s at %s: got %d bytes sha256 %s (row: %d bytes, %s), want %d bytes sha256 %x",
			row, row.ObjectKey, len(got), sum, row.Bytes, row.SHA256, len(want), wantSum)
	}
}

// CheckJobArchive asserts the whole record of an archived job: the row, every transition of
// Volcano's conditions once, every pod's logs byte-exact, job.json and manifest.json.
func (s *Rig) CheckJobArchive(t testing.TB, job *batchv1alpha1.Job, want map[string]map[string]testbed.ContainerLogs) []record.LogObject {
	t.Helper()
	ctx := t.Context()
	row, err := s.Records.Job(ctx, string(job.UID))
	if err != nil {
		t.Fatalf("job row: %v", err)
	}
	if row.ArchiveState != record.ArchiveArchived || row.ArchiveLocation == "" || row.Phase != string(job.Status.State.Phase) {
		t.Errorf("job row: state %s location %q phase %s; want archived with a location, phase %s", row.ArchiveState, row.ArchiveLocation, row.Phase, job.Status.State.Phase)
	}
	s.CheckTransitions(t, job)
	logs, err := s.Records.LogObjects(ctx, string(job.UID))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := s.Records.Pods(ctx, string(job.UID))
	if err != nil {
		t.Fatal(err)
	}
	podName := map[string]string{}
	for _, p := range pods {
		podName[p.UID] = p.Name
		if p.ArchiveState != record.ArchiveArchived {
			t.Errorf("pod %s (%s): archive state %s, want archived", p.Name, p.UID, p.ArchiveState)
		}
	}
	seen := map[string]bool{}
	for _, l := range logs {
		name := podName[l.PodUID]
		cl, ok := want[name][l.Container]
		if !ok {
			t.Errorf("unexpected log %s of pod %s", l, name)
			continue
		}
		// Byte-exact against what the container wrote (the node's runtime keeps it), which must
		// also be what the test meant it to write.
		w, run := cl.Current, int32(0)
		if cl.Previous != nil {
			run = 1
		}
		if l.Instance != record.InstanceCurrent {
			w, run = cl.Previous, 0
		}
		written := s.Env.Written(job.Namespace, name, l.Container, run)
		if !bytes.Equal(written, testbed.Bytes(w)) {
			t.Errorf("container %s of pod %s wrote %d bytes in run %d, the test meant %d", l.Container, name, len(written), run, len(testbed.Bytes(w)))
		}
		s.CheckLog(t, l, written)
		s.CheckSources(t, l, run)
		seen[name+"/"+l.Container+"/"+l.Instance] = true
	}
	for pod, cs := range want {
		for c, cl := range cs {
			if !seen[pod+"/"+c+"/current"] {
				t.Errorf("no archived current log for %s/%s", pod, c)
			}
			if cl.Previous != nil && !seen[pod+"/"+c+"/"+record.PreviousInstance(1)] {
				t.Errorf("no archived previous log for %s/%s", pod, c)
			}
		}
	}
	for _, key := range []string{"job.json", "manifest.json"} {
		if _, err := s.Store.Stat(ctx, "archive/"+job.Namespace+"/"+job.Name+"/"+string(job.UID)+"/"+key); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
	return logs
}

// CheckSources asserts that the record says which capture stored every byte of a stored log, the
// log of the container's run: ranges that cover it from its first byte to its last, each by the
// run's first owner or, after a hand-over, by the API capture.
func (s *Rig) CheckSources(t testing.TB, l record.LogObject, run int32) {
	t.Helper()
	k := db.RunKey{PodUID: l.PodUID, Container: l.Container, Run: run}
	ranges, err := s.Records.Sources(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := s.Records.Run(t.Context(), k, 0)
	if err != nil {
		t.Errorf("log %s: run %d: %v", l, run, err)
		return
	}
	var at int64
	for _, r := range ranges {
		if r.From != at || r.Instance != l.Instance || (r.Source != owner.ClaimedOwner && r.Source != record.CapturedByAPI) {
			t.Errorf("log %s: source ranges %+v do not cover it from 0 to %d, each by its run's owner (%s, now %s)", l, ranges, l.Bytes, owner.ClaimedOwner, owner.Owner)
			return
		}
		at = r.To
	}
	if at != l.Bytes {
		t.Errorf("log %s: source ranges %+v cover %d of its %d bytes", l, ranges, at, l.Bytes)
	}
}

// CheckCapturedBy asserts that every container run of the job was captured by one capture,
// owner (record.CapturedByAgent or CapturedByAPI), from its claim on, never handed over, and that
// every byte of its logs is recorded as that capture's.
func (s *Rig) CheckCapturedBy(t testing.TB, jobUID, owner string) {
	t.Helper()
	runs, err := s.Records.JobRuns(t.Context(), jobUID)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Errorf("job %s: no run recorded with its capture", jobUID)
	}
	for _, r := range runs {
		if r.Owner != owner || r.ClaimedOwner != owner || !r.HandedOverAt.IsZero() {
			t.Errorf("run %s: owner %s (claimed by %s, handed over at %v: %s), want %s's throughout", r.RunKey, r.Owner, r.ClaimedOwner, r.HandedOverAt, r.HandOverReason, owner)
		}
		ranges, err := s.Records.Sources(t.Context(), r.RunKey)
		if err != nil {
			t.Fatal(err)
		}
		for _, sr := range ranges {
			if sr.Source != owner {
				t.Errorf("run %s: bytes [%d, %d) recorded as captured by %s, want %s", r.RunKey, sr.From, sr.To, sr.Source, owner)
			}
		}
	}
}

// CheckTransitions asserts that every phase change Volcano recorded is in the database once.
func (s *Rig) CheckTransitions(t testing.TB, job *batchv1alpha1.Job) {
	t.Helper()
	ts, err := s.Records.Transitions(t.Context(), string(job.UID))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, tr := range ts {
		got[tr.Phase+"@"+tr.Time.UTC().Format(time.RFC3339)]++
	}
	for _, c := range job.Status.Conditions {
		k := string(c.Status) + "@" + c.LastTransitionTime.UTC().Format(time.RFC3339)
		if got[k] != 1 {
			t.Errorf("transition %s recorded %d times, want once (recorded: %v)", k, got[k], got)
		}
	}
	if len(job.Status.Conditions) == 0 {
		t.Errorf("job has no conditions to compare")
	}
}

// ExpectEvent asserts that an Event with the reason is recorded in the rig's namespace within
// 30 s: the recorder sends Events asynchronously, after the change the caller waited for.
func (s *Rig) ExpectEvent(t testing.TB, reason string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var events corev1.EventList
		if err := s.Env.Client.List(t.Context(), &events, client.InNamespace(s.NS)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Reason == reason {
				return
			}
		}
	}
	t.Errorf("no %s event in %s within 30 s", reason, s.NS)
}

// Keys lists the keys of every object in the rig's store under prefix, sorted.
func (s *Rig) Keys(t testing.TB, prefix string) []string {
	t.Helper()
	var keys []string
	if err := s.Store.List(t.Context(), prefix, func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// Gaps returns the gaps recorded in the logs of the job.
func (s *Rig) Gaps(t testing.TB, jobUID string) []record.Gap {
	t.Helper()
	g, err := s.Records.Gaps(t.Context(), jobUID)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// WaitPodGone watches the rig's pod name until it is gone, and fails the test if it was released
// (its pod finalizer removed) while its first container still ran. It returns the pod as last seen.
func (s *Rig) WaitPodGone(t testing.TB, name string, timeout time.Duration) corev1.Pod {
	t.Helper()
	var last corev1.Pod
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		var p corev1.Pod
		err := s.Env.Client.Get(t.Context(), client.ObjectKey{Namespace: s.NS, Name: name}, &p)
		if apierrors.IsNotFound(err) {
			return last
		}
		if err == nil {
			if !controllerutil.ContainsFinalizer(&p, tracking.PodFinalizer) && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Terminated == nil {
				t.Fatalf("pod released while its container still ran (%+v)", p.Status.ContainerStatuses[0].State)
			}
			last = p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not gone within %s (phase %s)", timeout, last.Status.Phase)
		}
	}
}
