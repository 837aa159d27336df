package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/objstore"
)

// TestRunNeverSeenIsNotCompleteEmpty: a run whose files were gone before the agent saw any (it
// was down), not over yet at its first poll: the follow reader waits on an empty entry; once over,
// the read to the end must fail with a ReadError (the agent then records the "collected" gap,
// lost), never end empty as if the run had written nothing.
func TestRunNeverSeenIsNotCompleteEmpty(t *testing.T) {
	root := t.TempDir()
	s := startSource(t, root)
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := &memRecords{}
	cfg := capture.Config{SegmentBytes: 1000, SegmentAge: time.Hour, Poll: 10 * time.Millisecond, Retry: 20 * time.Millisecond}
	calls := 0
	over := func(context.Context) (capture.End, error) { calls++; return capture.End{Over: calls > 3}, nil }
	_, err = capture.Capture(t.Context(), cfg, s, s.Records(recs), store, func(seq int32) string { return fmt.Sprint(seq) }, ref, over, nil)
	var unread *capture.ReadError
	if !errors.As(err, &unread) {
		t.Fatalf("capture of a run no file of which was ever held ended with %v, want a ReadError", err)
	}
}

// TestLetGoFileDoesNotBlockRelease: a file let go before the reader reached it counts as drained:
// the later files of the run are released once their bytes are durable, and are never let go
// later with a gap for bytes that are stored.
func TestLetGoFileDoesNotBlockRelease(t *testing.T) {
	dir := logDir(t)
	root := filepath.Dir(filepath.Dir(dir))
	c := &criLog{t0: time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)}
	a, b, cur := filepath.Join(dir, "0.log.20261125-010000"), filepath.Join(dir, "0.log.20261125-010010"), filepath.Join(dir, "0.log")
	c.rec("stdout", "in A", false)
	c.flush(t, a, false)
	c.t0 = c.t0.Add(10 * time.Second)
	c.rec("stdout", "in B", false)
	c.flush(t, b, false)
	c.t0 = c.t0.Add(10 * time.Second)
	c.rec("stdout", "in C", false)
	c.flush(t, cur, false)
	var lets []LetGo
	s, err := NewFileSource(root, 1, func(_ RunKey, lg LetGo) { lets = append(lets, lg) }, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	k := RunKey{PodUID: "uid1", Container: "main"}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	s.bound() // A is let go: deleted, over the 1-byte limit
	rc, err := s.Open(context.Background(), ref, capture.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); err != nil {
		t.Fatal(err)
	}
	s.Durable(k, c.t0.Add(time.Hour)) // everything read is durable
	s.mu.Lock()
	bHeld := s.runs[k].files[1].f != nil
	s.mu.Unlock()
	if bHeld {
		t.Errorf("B, drained and durable, is still held after A was let go")
	}
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	s.bound()
	if len(lets) != 1 || lets[0].Name != filepath.Base(a) {
		t.Errorf("let go %+v, want only A", lets)
	}
}
