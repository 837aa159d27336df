package capture

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Manager runs captures in the background, at most a bound of them at once (slots), and tells the
// pod reconciler when one ends. It is a controller-runtime Runnable that needs the leader's lease:
// only the leader captures.
//
// Slots are shared fairly between namespaces, so that one tenant's containers cannot keep
// another's from being captured. A namespace's share is the slots divided by the namespaces that
// hold or wait for one (at least one slot). A freed slot goes
//   - to a namespace below its share before one at or above it;
//   - then to a capture of an ended container before one of a running container: a node deletes
//     an ended pod's logs about a minute after it stops, while a running container's log stays
//     until it ends;
//   - then to the namespace holding the fewest slots, and among those, round robin (the one given
//     a slot longest ago).
//
// Within a namespace each kind waits in arrival order. When a namespace waits below its share and
// no slot is free, a namespace above its share gives one up: its newest capture of a running
// container is stopped (its context cancelled with ErrPreempted), its pod is sent on Events like
// any ended capture's, and its reconciler queues it again. It stores the segment it holds before
// it returns (Capture), and resumes from there: nothing it read needs the node again.
//
// A waiting capture is a record in a queue, with its key, its pod's name and the function to run:
// no goroutine and no copy of the pod. Its goroutine starts when it is given a slot. (The archiver
// may give a waiting capture's function its run's start, read with others: only one of a run
// with nothing stored yet, of a fixed size.)
type Manager struct {
	events chan event.GenericEvent
	slots  int

	mu      sync.Mutex
	ctx     context.Context
	free    int                // slots not taken
	tenants map[string]*tenant // namespaces holding or waiting for a slot
	active  map[string]*waiter // captures running or waiting, by key
	// stopping counts the captures stopped for another namespace that have not returned yet:
	// their slots are as good as free.
	stopping int
	// quiet keeps, by key, the quiet mark of a capture stopped for another namespace before its
	// run's first line (see capture.followedQuiet), for the capture that resumes it; at most
	// quietMarksMax of them. A mark lost costs at most a gap the run did not need.
	quiet map[string]time.Time
	// tick orders grants and namespaces' arrivals: round robin and newest-first preemption.
	tick    uint64
	wg      sync.WaitGroup
	started chan struct{}
}

// tenant is a namespace holding or waiting for slots.
type tenant struct {
	held     int          // slots it holds, stopping captures included
	stopping int          // its captures stopped for another namespace, not returned yet
	waiting  [2]list.List // waiting captures (*waiter): [0] of ended containers, [1] of running ones
	running  map[*waiter]struct{}
	served   uint64 // the tick of its last grant (of its arrival, before any)
}

func (t *tenant) waiters() int { return t.waiting[0].Len() + t.waiting[1].Len() }

// before reports whether a slot goes to t before o (see Manager).
func (t *tenant) before(o *tenant, share int) bool {
	if tu, ou := t.held < share, o.held < share; tu != ou {
		return tu
	}
	if te, oe := t.waiting[0].Len() > 0, o.waiting[0].Len() > 0; te != oe {
		return te
	}
	if t.held != o.held {
		return t.held < o.held
	}
	return t.served < o.served
}

// waiter is one capture, waiting for a slot or holding one.
type waiter struct {
	key   string
	pod   types.NamespacedName
	fn    func(context.Context)
	ended bool          // its container ended: it waits in waiting[0]
	elem  *list.Element // its place in its namespace's queue while it waits; nil once granted
	// While it runs: when it was granted (a tick), how to stop it, and whether it was stopped.
	granted uint64
	cancel  context.CancelCauseFunc
	stopped bool
	// done is closed once it has returned and let its slot go.
	done chan struct{}
	// run is what it shares with its capture, through the capture's context (see managed).
	run *managed
}

func queue(ended bool) int {
	if ended {
		return 0
	}
	return 1
}

// ErrPreempted is the cause of the context of a capture stopped to give its slot to another
// namespace (context.Cause).
var ErrPreempted = errors.New("capture stopped for another namespace")

// yield stores, when the capture was stopped for another namespace (ErrPreempted), the segment it
// holds, and what it holds of its last read once that is known to be the run's (bind.go): its next capture resumes from there, with nothing to read again from the node, which may
// have rotated it away by then. The store and database calls bound themselves.
func (c *capture) yield(ctx context.Context, over func(context.Context) (End, error)) {
	if !errors.Is(context.Cause(ctx), ErrPreempted) || c.unfollowed {
		return // a run held back whole waits for its gap check (maybeRotated)
	}
	ctx = context.WithoutCancel(ctx)
	// The lines held of the last read are the run's once the status says so (bind.go).
	err := c.settle(ctx, over)
	if err == nil {
		err = c.flush(ctx)
	}
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Storing the segment of a stopped capture failed; it is read again", "log", c.ref.String())
	}
}

// NewManager returns a manager running at most maxStreams captures at once.
func NewManager(maxStreams int) *Manager {
	return &Manager{slots: maxStreams, free: maxStreams, events: make(chan event.GenericEvent, 1024),
		tenants: map[string]*tenant{}, active: map[string]*waiter{}, quiet: map[string]time.Time{}, started: make(chan struct{})}
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

// Events are the pods whose capture ended, for a controller's WatchesRawSource. An event's object
// carries only the pod's namespace and name.
func (m *Manager) Events() <-chan event.GenericEvent { return m.events }

// Active reports whether a capture runs (or waits for a slot) under key.
func (m *Manager) Active(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active[key] != nil
}

// Ensure runs fn under key unless a capture under that key runs or waits already; pod is the pod
// whose container it captures (its namespace is the capture's tenant), and ended says that the
// container has ended, so that its capture goes before those of running containers (a waiting
// capture whose container has since ended moves forward). A capture stopped for another namespace
// sees its context's cause ErrPreempted. When fn returns, the pod is sent on
// Events so that its reconciler looks again. fn must return when its context ends: the manager
// stops it so when it shuts down, or to give its slot to another namespace. Ensure reports false
// if the manager is not started yet (the caller retries later).
func (m *Manager) Ensure(key string, pod types.NamespacedName, ended bool, fn func(context.Context)) bool {
	select {
	case <-m.started:
	default:
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.active[key]; w != nil {
		select {
		case w.run.changed <- struct{}{}:
		default: // signalled already
		}
		if ended && !w.ended && w.elem != nil {
			q := &m.tenants[w.pod.Namespace].waiting
			q[queue(false)].Remove(w.elem)
			w.ended = true
			w.elem = q[queue(true)].PushBack(w) // to the back of the ended queue
		}
		return true
	}
	if m.ctx.Err() != nil {
		return true
	}
	w := &waiter{key: key, pod: pod, fn: fn, ended: ended, done: make(chan struct{}),
		run: &managed{changed: make(chan struct{}, 1)}}
	m.active[key] = w
	t := m.tenants[pod.Namespace]
	if t == nil {
		m.tick++
		t = &tenant{running: map[*waiter]struct{}{}, served: m.tick}
		m.tenants[pod.Namespace] = t
	}
	w.elem = t.waiting[queue(ended)].PushBack(w)
	m.schedule()
	return true
}

// quietMarksMax bounds the quiet marks a Manager keeps.
const quietMarksMax = 10000

// managedKey carries, in the context of a capture the manager runs, its *managed.
type managedKey struct{}

// managed is what a capture run by the manager shares with it. changed is signalled when the
// capture's pod changed (the reconciler called Ensure for it again): its status may tell that the
// run ended, and the node removes a deleted pod's logs within a second of its containers' end
// (0.6 s on a real kubelet), so a capture that waited for its next Poll to read the rest of the
// run could find them gone. quiet is the capture's quiet mark (see capture.followedQuiet), kept
// across a stop for another namespace: the capture that resumes the run is not late for it.
type managed struct {
	changed chan struct{}
	quiet   time.Time
}

// managedBy returns what the manager that runs the capture with ctx shares with it; nil outside a
// Manager.
func managedBy(ctx context.Context) *managed {
	m, _ := ctx.Value(managedKey{}).(*managed)
	return m
}

// ErrSealed is the cause of the context of a capture stopped because its pod's job is being
// sealed (Stop): nothing may be added to a sealed record.
var ErrSealed = errors.New("capture stopped: its job is being sealed")

// Stop stops every capture whose key match accepts, running or waiting, and waits until the
// running ones have returned (or ctx ends): a waiting one is dropped, a running one sees its
// context cancelled with ErrSealed. The seal of a job stops its pods' captures so, before it
// reads the rows it seals and sweeps the segments left in the store: no capture writes either
// after it. A capture of those pods started later is refused by the database (the job is
// finalized).
func (m *Manager) Stop(ctx context.Context, match func(key string) bool) error {
	m.mu.Lock()
	var done []chan struct{}
	for key, w := range m.active {
		if !match(key) {
			continue
		}
		if w.elem != nil { // waiting: never started
			t := m.tenants[w.pod.Namespace]
			t.waiting[queue(w.ended)].Remove(w.elem)
			delete(m.active, key)
			if t.held == 0 && t.waiters() == 0 {
				delete(m.tenants, w.pod.Namespace)
			}
			continue
		}
		w.cancel(ErrSealed)
		done = append(done, w.done)
	}
	m.mu.Unlock()
	for _, d := range done {
		select {
		case <-d:
		case <-ctx.Done():
			return fmt.Errorf("wait for captures to stop: %w", ctx.Err())
		}
	}
	return nil
}

// share is each namespace's fair share of the slots. Called with mu held.
func (m *Manager) share() int { return max(1, m.slots/max(1, len(m.tenants))) }

// schedule gives the free slots to waiting captures, then, if namespaces still wait below their
// share, stops captures of namespaces above theirs. Called with mu held.
func (m *Manager) schedule() {
	if m.ctx.Err() != nil {
		return // shutting down: what still waits is dropped
	}
	for m.free > 0 {
		t := m.next()
		if t == nil {
			return
		}
		q := &t.waiting[queue(true)]
		if q.Len() == 0 {
			q = &t.waiting[queue(false)]
		}
		m.grant(t, q.Remove(q.Front()).(*waiter))
	}
	m.rebalance()
}

// next is the namespace whose capture gets the next slot, nil if none waits. Called with mu held.
func (m *Manager) next() *tenant {
	share := m.share()
	var best *tenant
	for _, t := range m.tenants {
		if t.waiters() > 0 && (best == nil || t.before(best, share)) {
			best = t
		}
	}
	return best
}

// grant starts w, of namespace t, in a free slot. Called with mu held.
func (m *Manager) grant(t *tenant, w *waiter) {
	m.free--
	m.tick++
	t.held++
	t.served, w.granted, w.elem = m.tick, m.tick, nil
	t.running[w] = struct{}{}
	var ctx context.Context
	w.run.quiet = m.quiet[w.key]
	delete(m.quiet, w.key)
	ctx, w.cancel = context.WithCancelCause(context.WithValue(m.ctx, managedKey{}, w.run))
	m.wg.Add(1)
	go m.run(ctx, t, w)
}

// run runs a granted capture, then frees its slot and sends its pod on Events.
func (m *Manager) run(ctx context.Context, t *tenant, w *waiter) {
	defer m.wg.Done()
	w.fn(ctx)
	m.mu.Lock()
	w.cancel(nil)
	delete(m.active, w.key)
	delete(t.running, w)
	t.held--
	m.free++
	if w.stopped {
		t.stopping--
		m.stopping--
		if !w.run.quiet.IsZero() {
			if len(m.quiet) >= quietMarksMax {
				clear(m.quiet) // marks of captures never resumed (their pod gone, their job sealed)
			}
			m.quiet[w.key] = w.run.quiet
		}
	}
	if t.held == 0 && t.waiters() == 0 {
		delete(m.tenants, w.pod.Namespace)
	}
	m.schedule()
	m.mu.Unlock()
	close(w.done)
	pod := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: w.pod.Namespace, Name: w.pod.Name}}
	select {
	case m.events <- event.GenericEvent{Object: pod}:
	case <-m.ctx.Done():
	case <-time.After(time.Minute):
		// The reconciler is not reading: its periodic requeue finds the result.
	}
}

// rebalance stops, while namespaces wait below their share for more slots than are being freed,
// the newest capture of a running container of the namespace furthest above its share. Called
// with mu held, once the free slots are given.
func (m *Manager) rebalance() {
	share := m.share()
	owed := 0
	for _, t := range m.tenants {
		if t.held < share {
			owed += min(t.waiters(), share-t.held)
		}
	}
	for m.stopping < owed {
		var over *tenant
		var newest *waiter
		for _, t := range m.tenants {
			if t.held-t.stopping <= share || (over != nil && t.held-t.stopping <= over.held-over.stopping) {
				continue
			}
			if w := t.newestRunning(); w != nil {
				over, newest = t, w
			}
		}
		if over == nil {
			return
		}
		newest.stopped = true
		over.stopping++
		m.stopping++
		newest.cancel(ErrPreempted)
	}
}

// newestRunning is t's capture of a running container granted last and not stopped yet, nil if
// none: captures of ended containers are never stopped, they end by themselves.
func (t *tenant) newestRunning() *waiter {
	var newest *waiter
	for w := range t.running {
		if !w.stopped && !w.ended && (newest == nil || w.granted > newest.granted) {
			newest = w
		}
	}
	return newest
}
