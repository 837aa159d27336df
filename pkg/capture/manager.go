package capture

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Manager runs captures in the background, at most a bound of them at once, and tells the pod
// reconciler when one ends. It is a controller-runtime Runnable that needs the leader's lease: only
// the leader captures.
type Manager struct {
	slots  chan struct{}
	events chan event.GenericEvent

	mu      sync.Mutex
	ctx     context.Context
	active  map[string]bool
	wg      sync.WaitGroup
	started chan struct{}
}

// NewManager returns a manager running at most maxStreams captures at once; the others wait for a
// slot, in no particular order.
func NewManager(maxStreams int) *Manager {
	return &Manager{slots: make(chan struct{}, maxStreams), events: make(chan event.GenericEvent, 1024),
		active: map[string]bool{}, started: make(chan struct{})}
}

// Start runs until ctx ends, then waits for every capture to stop.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	m.mu.Unlock()
	close(m.started)
	<-ctx.Done()
	m.wg.Wait()
	return nil
}

// NeedLeaderElection: captures write the archive, so only the leader runs them.
func (m *Manager) NeedLeaderElection() bool { return true }

// Events are the pods whose capture ended, for a controller's WatchesRawSource.
func (m *Manager) Events() <-chan event.GenericEvent { return m.events }

// Active reports whether a capture runs (or waits for a slot) under key.
func (m *Manager) Active(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active[key]
}

// Ensure runs fn under key unless a capture under that key runs already. When fn returns, obj is
// sent on Events so that its reconciler looks again. It reports false if the manager is not
// started yet (the caller retries later).
func (m *Manager) Ensure(key string, obj client.Object, fn func(context.Context)) bool {
	select {
	case <-m.started:
	default:
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active[key] || m.ctx.Err() != nil {
		return true
	}
	m.active[key] = true
	m.wg.Add(1)
	ctx := m.ctx
	go func() {
		defer m.wg.Done()
		select {
		case m.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		fn(ctx)
		<-m.slots
		m.mu.Lock()
		delete(m.active, key)
		m.mu.Unlock()
		select {
		case m.events <- event.GenericEvent{Object: obj}:
		case <-ctx.Done():
		case <-time.After(time.Minute):
			// The reconciler is not reading: its periodic requeue finds the result.
		}
	}()
	return true
}
