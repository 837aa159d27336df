package capture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/jobvault/jobvault/pkg/objstore"
)

// TestFinalLogWrittenOnce: a run's final object is never replaced. Under a key that already holds
// another log (a run wrongly named for another's instance, say), the write, whole or assembled,
// fails with a *ConflictError and leaves that log as it is; under a key that holds the same log
// (an earlier pass stopped before recording it), the write succeeds and writes nothing.
// Before, both writes replaced the other log: its row's sha256 no longer matched its object.
func TestFinalLogWrittenOnce(t *testing.T) {
	const key = "final.log.gz"
	for _, tc := range []struct {
		name  string
		store func(r *rig, ctx context.Context) (Assembled, error)
	}{
		{"whole", func(r *rig, ctx context.Context) (Assembled, error) {
			r.write("a short run's only line\n", false)
			r.node.mu.Lock()
			r.node.over = true
			r.node.mu.Unlock()
			a, err := Capture(ctx, r.cfg, r.node, r.recs, r.store, r.segKey, r.ref, r.over,
				func(bool) (string, time.Time) { return key, time.Time{} })
			if a == nil && err == nil {
				return Assembled{}, errors.New("not written whole")
			}
			if a == nil {
				return Assembled{}, err
			}
			return *a, err
		}},
		{"assembled", func(r *rig, ctx context.Context) (Assembled, error) {
			return Assemble(ctx, r.store, r.ref, key, r.segmented(ctx, t), time.Time{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			// The key holds another run's log.
			r := newRig(t)
			other, _ := gzipped([]byte("another run's line\n"))
			if err := r.store.Put(ctx, key, bytes.NewReader(other), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			_, err := tc.store(r, ctx)
			var conflict *ConflictError
			if !errors.As(err, &conflict) || !errors.Is(err, objstore.ErrExists) {
				t.Errorf("stored over another log: error %v, want a *ConflictError", err)
			}
			if got := stored(t, r.store, key); !bytes.Equal(got, other) {
				t.Errorf("the log under %s was replaced", key)
			}

			// The key holds the same log: written by an earlier pass.
			r = newRig(t)
			first, err := tc.store(r, ctx)
			if err != nil {
				t.Fatal(err)
			}
			before := stored(t, r.store, key)
			r2 := newRig(t)
			r2.store = r.store
			again, err := tc.store(r2, ctx)
			if err != nil || again.SHA256 != first.SHA256 || again.StoredBytes != int64(len(before)) || again.StoredSHA256 != "" {
				t.Errorf("stored the same log again: %+v (%v), want success with %+v's hash and size, and no StoredSHA256 (this write checked nothing)", again, err, first)
			}
			if got := stored(t, r.store, key); !bytes.Equal(got, before) {
				t.Errorf("the same log under %s was written again", key)
			}
		})
	}
}

// gzipped compresses b as one gzip member.
func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	err := zw.Close()
	return buf.Bytes(), err
}

// stored returns the stored bytes of the object under key.
func stored(t *testing.T, store objstore.Store, key string) []byte {
	t.Helper()
	rc, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSameLogTellsOtherObjectsFromReadFailures: what a write once finds under its key is the same
// log, another (a *ConflictError: writing again cannot help), or unread (an error, retried). An
// object that is no gzip log at all, truncated or empty, is another: before, a truncated one
// failed the write as a read error, retried without end, and an empty one passed for the empty
// log.
func TestSameLogTellsOtherObjectsFromReadFailures(t *testing.T) {
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := []byte("a run's only line\n")
	whole, err := gzipped(log)
	if err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(log))
	for _, tc := range []struct {
		name     string
		object   []byte
		sum      string
		conflict bool
	}{
		{"the same log", whole, sum, false},
		{"another log", whole, emptySHA256, true},
		{"a truncated gzip", whole[:len(whole)-6], sum, true},
		{"an empty object for the empty log", nil, emptySHA256, true},
		{"not gzip", log, sum, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			if err := store.Put(t.Context(), key, bytes.NewReader(tc.object), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			size, err := sameLog(t.Context(), store, Ref{Pod: "p", Container: "main"}, key, tc.sum)
			var conflict *ConflictError
			switch {
			case tc.conflict && !errors.As(err, &conflict):
				t.Errorf("sameLog: %d, %v; want a *ConflictError", size, err)
			case !tc.conflict && (err != nil || size != int64(len(tc.object))):
				t.Errorf("sameLog: %d, %v; want %d and no error", size, err, len(tc.object))
			}
		})
	}
	if _, err := sameLog(t.Context(), store, Ref{}, "absent", sum); err == nil || errors.As(err, new(*ConflictError)) {
		t.Errorf("sameLog of an object it cannot read: %v, want an error that is not a conflict", err)
	}
}
