package archiver

import (
	"context"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/objstore"
)

// slowStore counts the Puts in flight, and the most at once.
type slowStore struct {
	objstore.Store
	now, most atomic.Int32
}

func (s *slowStore) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) error {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	time.Sleep(20 * time.Millisecond)
	_, err := io.Copy(io.Discard, r)
	return err
}

// TestCapturePutsLimited: the captures' writes to the store are bounded (a burst of ended pods
// started 600 at once, each on a new connection to the store: its client keeps 16 idle), and a
// write waiting for a slot ends with its context.
func TestCapturePutsLimited(t *testing.T) {
	slow := &slowStore{}
	l := newLimitedPuts(slow, 4)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Put(t.Context(), "k", strings.NewReader("x"), objstore.PutOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if most := slow.most.Load(); most > 4 || most < 1 {
		t.Errorf("%d Puts in flight at once, want 1 to 4", most)
	}
	l.slots <- struct{}{}
	l.slots <- struct{}{}
	l.slots <- struct{}{}
	l.slots <- struct{}{}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := l.Put(ctx, "k", strings.NewReader("x"), objstore.PutOptions{}); err == nil {
		t.Error("a Put waiting for a slot did not end with its context")
	}
}
