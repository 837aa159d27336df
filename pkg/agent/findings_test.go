package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
