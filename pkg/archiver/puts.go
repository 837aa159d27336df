package archiver

import (
	"context"
	"fmt"
	"io"

	"github.com/jobvault/jobvault/pkg/objstore"
)

// maxCapturePuts bounds the captures' writes to the store in flight at once: as many as minio-go's
// transport keeps idle connections to a host (MaxIdleConnsPerHost, 16). A burst of ended pods
// starts all their captures at once (their reads must start before the kubelet removes the logs),
// and their Puts were as many at once: 600 in BenchmarkReleaseThroughput, each but 16 on a new
// connection closed after it (740 connections to MinIO for 1,000 pods; with TLS, a handshake
// each). Bounded, the Puts reuse the pool's connections; the bytes wait in memory, already
// accounted to the capture memory budget.
const maxCapturePuts = 16

// limitedPuts is the captures' store: at most cap(slots) Puts in flight. Only Put waits: reads,
// composes and deletes are the seal's and assembly's, few at a time.
type limitedPuts struct {
	objstore.Store
	slots chan struct{}
}

func newLimitedPuts(s objstore.Store, n int) *limitedPuts {
	return &limitedPuts{Store: s, slots: make(chan struct{}, n)}
}

// Put writes the object once a slot is free.
func (l *limitedPuts) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) error {
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait to write %s: %w", key, ctx.Err())
	}
	defer func() { <-l.slots }()
	return l.Store.Put(ctx, key, r, opts)
}
