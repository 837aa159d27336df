package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// rig is one archiver process (the real binary) with its own namespace, database and store,
// behind the real webhook.
type rig struct {
	*stack.Archiver
	env     *testbed.Env
	ns      string
	records *db.DB
	store   objstore.Store
}

// newRig registers the webhook, makes a namespace, a database and a store of the given backend
// (s3 = MinIO, gcs = the GCS emulator, fs = a directory) and starts the archiver for them.
func newRig(t testing.TB, backend string, flags ...string) *rig {
	t.Helper()
	env := testbed.Cluster(t)
	stack.Webhook(t, env)
	s := &rig{env: env, ns: env.Namespace(t)}
	s.Archiver = stack.NewArchiver(t, env, testbed.Postgres(t), stack.Options{Backend: backend, FSRoot: t.TempDir(),
		Namespaces: []string{s.ns}, Flags: flags})
	s.store = s.Archiver.Store(t)
	s.Start(t)
	var err error
	if s.records, err = db.Open(context.Background(), s.DSN, db.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.records.Close() })
	return s
}

// waitArchived waits until the job's finalizer is released and returns the job as last seen.
func (s *rig) waitArchived(t testing.TB, job *batchv1alpha1.Job, timeout time.Duration) *batchv1alpha1.Job {
	t.Helper()
	var j batchv1alpha1.Job
	deadline := time.Now().Add(timeout)
	for {
		err := s.env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &j)
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

// readLog reads an archived log object back, decompressed, with its sha256.
func (s *rig) readLog(t testing.TB, key string) ([]byte, string) {
	t.Helper()
	rc, err := s.store.Get(t.Context(), key)
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

// checkLog asserts that the log object row is stored and its object holds exactly want.
func (s *rig) checkLog(t testing.TB, row db.LogObject, want []byte) {
	t.Helper()
	if row.State != db.LogStored {
		t.Errorf("log %s: state %s (%s), want stored", row, row.State, row.Reason)
		return
	}
	got, sum := s.readLog(t, row.ObjectKey)
	wantSum := sha256.Sum256(want)
	if !bytes.Equal(got, want) || sum != hex.EncodeToString(wantSum[:]) || row.SHA256 != sum || row.Bytes != int64(len(want)) {
		t.Errorf("log %s at %s: got %d bytes sha256 %s (row: %d bytes, %s), want %d bytes sha256 %x",
			row, row.ObjectKey, len(got), sum, row.Bytes, row.SHA256, len(want), wantSum)
	}
}
