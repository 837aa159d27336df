package archiver

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kuberecord "k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// loggedRecords keeps log rows and run claims, so that a second capture of a run sees what the
// first recorded.
type loggedRecords struct {
	*memRecords
	mu      sync.Mutex
	logs    []record.LogObject
	claimed map[db.RunKey]bool
	// failPuts is how many PutLogObject calls fail before one succeeds.
	failPuts int
}

func (m *loggedRecords) PutLogObject(_ context.Context, l record.LogObject) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failPuts > 0 {
		m.failPuts--
		return errors.New("database down")
	}
	m.logs = append(m.logs, l)
	return nil
}

func (m *loggedRecords) PodLogObjects(_ context.Context, podUID string) ([]record.LogObject, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []record.LogObject
	for _, l := range m.logs {
		if l.PodUID == podUID {
			out = append(out, l)
		}
	}
	return out, nil
}

func (m *loggedRecords) ClaimRun(_ context.Context, c db.RunClaim, _ time.Duration) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	first := !m.claimed[c.RunKey]
	m.claimed[c.RunKey] = true
	return record.CapturedByAPI, first, nil
}

// StartRun claims the run and finds its log row, as db.StartRun does.
func (m *loggedRecords) StartRun(ctx context.Context, c db.RunClaim, healthy time.Duration, instance string) (db.RunStart, error) {
	owner, first, err := m.ClaimRun(ctx, c, healthy)
	if err != nil {
		return db.RunStart{}, err
	}
	start := db.RunStart{Owner: owner, First: first}
	logs, _ := m.PodLogObjects(ctx, c.PodUID)
	for i := range logs {
		if logs[i].Container == c.Container && logs[i].Instance == instance {
			start.Recorded = &logs[i]
		}
	}
	return start, nil
}

// StartRuns is StartRun for each.
func (m *loggedRecords) StartRuns(ctx context.Context, runs []db.RunToStart, healthy time.Duration) ([]db.RunStart, error) {
	return startEach(ctx, m.StartRun, runs, healthy)
}

// RecordRunLog records the row with loggedRecords' PutLogObject.
func (m *loggedRecords) RecordRunLog(ctx context.Context, l record.LogObject, _ []record.SourceRange, pod *db.PodArchive) error {
	if err := m.PutLogObject(ctx, l); err != nil || pod == nil {
		return err
	}
	return m.MarkPodArchived(ctx, l.PodUID, pod.At, pod.Reason)
}

// countingStore counts the writes (Put and Compose) to each key.
type countingStore struct {
	objstore.Store
	mu     sync.Mutex
	writes map[string]int
}

func (s *countingStore) count(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes[key]++
}

func (s *countingStore) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) error {
	s.count(key)
	return s.Store.Put(ctx, key, r, opts)
}

func (s *countingStore) Compose(ctx context.Context, dst string, srcs []string, opts objstore.PutOptions) error {
	s.count(dst)
	return s.Store.Compose(ctx, dst, srcs, opts)
}

// staticLog serves the same log for every open.
type staticLog string

func (l staticLog) Open(context.Context, capture.Ref, capture.OpenOptions) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(l))), nil
}

// TestCaptureRunWritesOnce: a run's final log object is written once, however often its capture
// runs or its record fails. Written again, it would get a second version in a versioned bucket,
// which Object Lock keeps (TestArchiveLocksFinalObjects/s3 found one).
//   - A capture of a run whose log is recorded already writes nothing. It runs when a pod's
//     reconcile reads the pod's log rows (archiveLogs) before the run's capture records its log,
//     and asks the capture manager for the run's capture (Ensure) after that capture ended: the
//     manager no longer knows it, and starts it again.
//   - When recording a log written whole fails (the database), the capture records it again,
//     without writing it again.
func TestCaptureRunWritesOnce(t *testing.T) {
	for name, tc := range map[string]struct{ captures, failPuts int }{
		"captured again once recorded": {captures: 2},
		"its record failed once":       {captures: 1, failPuts: 1},
	} {
		t.Run(name, func(t *testing.T) {
			r, store, records, job, ref, key := captureRig(t, tc.failPuts)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			for range tc.captures {
				r.captureRun(ctx, job, ref, record.ContainerRegular, nil)
			}
			if n := store.writes[key]; n != 1 || len(records.logs) != 1 {
				t.Errorf("%d writes of %s, %d log rows; want 1 and 1 (written once, recorded)", n, key, len(records.logs))
			}
		})
	}
}

// captureRig is a pod reconciler with one ended container run (ref) of job, whose records fail
// the first failPuts log rows, and the key of the run's final log object.
func captureRig(t *testing.T, failPuts int) (*PodReconciler, *countingStore, *loggedRecords, archive.JobRef, capture.Ref, string) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), batchv1alpha1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-w-0", UID: "pod-uid", CreationTimestamp: now},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{StartedAt: now, FinishedAt: now}}}}
	fs, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &countingStore{Store: fs, writes: map[string]int{}}
	records := &loggedRecords{memRecords: &memRecords{jobs: map[string]record.Job{}, pods: map[string]record.Pod{}}, claimed: map[db.RunKey]bool{},
		failPuts: failPuts}
	r := &PodReconciler{Deps: Deps{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod).Build(), Records: records, Store: store,
		Logs: staticLog("2023-11-14T22:13:20.000000000Z hello\n"), Recorder: kuberecord.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(now.Time)},
		Options: DefaultOptions()}
	job := archive.JobRef{Namespace: "ml", Name: "train", UID: "job-uid"}
	ref := capture.Ref{Namespace: "ml", Pod: pod.Name, PodUID: string(pod.UID), Container: "main"}
	key, err := r.Layout.PodLog(job, ref.Pod, ref.PodUID, ref.Container, record.InstanceCurrent)
	if err != nil {
		t.Fatal(err)
	}
	return r, store, records, job, ref, key
}
