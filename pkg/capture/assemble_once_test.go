package capture

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// composeCounter counts the Compose calls of a store.
type composeCounter struct {
	objstore.Store
	n atomic.Int32
}

func (s *composeCounter) Compose(ctx context.Context, dst string, srcs []string, opts objstore.PutOptions) error {
	s.n.Add(1)
	return s.Store.Compose(ctx, dst, srcs, opts)
}

// TestAssembleLockedOnce: a run assembled again (its record failed, or the archiver stopped
// before it, so its segments are still there) into a locked object is not composed again: on a
// versioned S3 bucket a second Compose adds a second version, which Object Lock keeps.
func TestAssembleLockedOnce(t *testing.T) {
	r := newRig(t)
	store := &composeCounter{Store: r.store}
	r.store = store
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	segs := r.segmented(ctx, t)
	until := time.Now().Add(time.Hour)
	first, err := Assemble(ctx, store, r.ref, "final.log.gz", segs, until)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Assemble(ctx, store, r.ref, "final.log.gz", segs, until)
	if err != nil {
		t.Fatal(err)
	}
	if n := store.n.Load(); n != 1 || again != first {
		t.Errorf("assembled twice: %d Compose calls, results %+v and %+v; want 1 call, the same result", n, first, again)
	}
}

// segmented captures a run of 20 lines of 48 bytes, stored in several segments, and returns them.
func (r *rig) segmented(ctx context.Context, t *testing.T) []record.Segment {
	t.Helper()
	done := r.start(ctx)
	for i := range 20 {
		r.write(fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", 40)), false)
	}
	r.end(t, done)
	segs, err := r.recs.Segments(ctx, r.ref.PodUID, r.ref.Container, r.ref.Run)
	if err != nil || len(segs) < 2 {
		t.Fatalf("segments: %d (%v), want several", len(segs), err)
	}
	return segs
}
