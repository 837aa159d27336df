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
//
// Captures of ended containers go first: a node deletes an ended pod's logs about a minute after
// it stops, while a running container's log stays until it ends. When every slot is taken (live
// follows, or captures held up by a store outage), a capture waiting for an ended container gets
// the next free slot before any waiting follow of a running one; each kind waits in arrival order.
type Manager struct {
	events chan event.GenericEvent

	mu      sync.Mutex
	ctx     context.Context
	free    int                // slots not taken
	queues  [2][]*waiter       // waiting captures: [0] of ended containers, [1] of running ones
	active  map[string]*waiter // captures running or waiting, by key
	wg      sync.WaitGroup
	started chan struct{}
}

// waiter is one capture: granted is closed when it holds a slot.
type waiter struct {
	granted chan struct{}
	ended   bool // its container ended: it waits in queues[0]
	running bool // it holds a slot
}

// NewManager returns a manager running at most maxStreams captures at once.
func NewManager(maxStreams int) *Manager {
	return &Manager{free: maxStreams, events: make(chan event.GenericEvent, 1024),
		active: map[string]*waiter{}, started: make(chan struct{})}
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
	return m.active[key] != nil
}

// Ensure runs fn under key unless a capture under that key runs already; ended says that the
// container has ended, so that its capture goes before those of running containers (a waiting
// capture whose container has since ended moves forward). When fn returns, obj is sent on Events
// so that its reconciler looks again. It reports false if the manager is not started yet (the
// caller retries later).
func (m *Manager) Ensure(key string, obj client.Object, ended bool, fn func(context.Context)) bool {
	select {
	case <-m.started:
	default:
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.active[key]; w != nil {
		if ended && !w.ended && !w.running {
			m.dequeue(w)
			w.ended = true
			m.enqueue(w) // to the back of the ended queue: a waiting capture means no slot is free
		}
		return true
	}
	if m.ctx.Err() != nil {
		return true
	}
	w := &waiter{granted: make(chan struct{}), ended: ended}
	m.active[key] = w
	m.enqueue(w)
	m.wg.Add(1)
	ctx := m.ctx
	go func() {
		defer m.wg.Done()
		select {
		case <-w.granted:
		case <-ctx.Done():
			m.mu.Lock()
			if !w.running {
				m.dequeue(w)
			}
			m.mu.Unlock()
			return
		}
		fn(ctx)
		m.mu.Lock()
		delete(m.active, key)
		m.release()
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

// enqueue gives w a free slot, or queues it. Called with mu held.
func (m *Manager) enqueue(w *waiter) {
	if m.free > 0 {
		m.free--
		m.grant(w)
		return
	}
	q := 1
	if w.ended {
		q = 0
	}
	m.queues[q] = append(m.queues[q], w)
}

// release hands a freed slot to the first waiting capture of an ended container, else of a
// running one, else keeps it free. Called with mu held.
func (m *Manager) release() {
	for q := range m.queues {
		if len(m.queues[q]) > 0 {
			w := m.queues[q][0]
			m.queues[q] = m.queues[q][1:]
			m.grant(w)
			return
		}
	}
	m.free++
}

func (m *Manager) grant(w *waiter) {
	w.running = true
	close(w.granted)
}

// dequeue removes a waiting w from its queue. Called with mu held.
func (m *Manager) dequeue(w *waiter) {
	for q := range m.queues {
		for i, x := range m.queues[q] {
			if x == w {
				m.queues[q] = append(m.queues[q][:i], m.queues[q][i+1:]...)
				return
			}
		}
	}
}
