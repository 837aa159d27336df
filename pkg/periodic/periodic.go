// Package periodic runs the archiver's periodic tasks (the untracked-pod sweep, the missed-event
// sweep, the retention pruner, the audit chain's signer, the backends' prober) the one way: on
// the leader only (the prober on every replica), with an injected clock, the first pass at start
// and each next one a period after the previous ended.
package periodic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Task is one pass of a periodic task. An error is logged and the pass is tried again at the
// next period: periodic tasks maintain or repair, and the next pass redoes what this one missed.
type Task func(ctx context.Context) error

// Runnable is a controller-runtime Runnable that runs Task every Period on the leader (on every
// replica with AllReplicas).
//
// The first pass runs at Start, so that a replica restarted more often than the period still
// runs the task (unless FirstAfterPeriod). The period counts from the end of a pass: passes never
// overlap, and a pass longer than the period is not followed by a burst of others to catch up.
type Runnable struct {
	// Name names the task in logs.
	Name   string
	Period time.Duration
	Task   Task
	// FirstAfterPeriod waits a Period before the first pass too, for a task whose work the start
	// does by itself (the informers' initial list enqueues every object, as the missed-event
	// sweep would).
	FirstAfterPeriod bool
	// AllReplicas runs the task on every replica, not only the leader: for what every replica
	// needs (the backends' prober, which answers each replica's readiness).
	AllReplicas bool
	Clock       clock.Clock
	Log         logr.Logger
}

// New returns a Runnable of task every period, checked: a nil task or clock, or a period that is
// not positive, is an error naming it.
func New(name string, period time.Duration, task Task, clk clock.Clock, log logr.Logger) (*Runnable, error) {
	var errs []error
	if task == nil {
		errs = append(errs, errors.New("task is nil"))
	}
	if period <= 0 {
		errs = append(errs, fmt.Errorf("period must be positive, got %s", period))
	}
	if clk == nil {
		errs = append(errs, errors.New("clock is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("periodic task %s: %w", name, err)
	}
	return &Runnable{Name: name, Period: period, Task: task, Clock: clk, Log: log}, nil
}

// NeedLeaderElection: periodic tasks run on the leader only, as the reconcilers do, unless
// AllReplicas.
func (r *Runnable) NeedLeaderElection() bool { return !r.AllReplicas }

// Start runs the task until ctx ends, and then returns nil. The task's context carries Log
// (logr.FromContext).
func (r *Runnable) Start(ctx context.Context) error {
	ctx = logr.NewContext(ctx, r.Log)
	if r.FirstAfterPeriod && !r.wait(ctx) {
		return nil
	}
	for {
		if err := r.Task(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error(err, "Periodic task failed; retrying at the next period", "task", r.Name, "period", r.Period)
		}
		if !r.wait(ctx) {
			return nil
		}
	}
}

// wait waits a Period, and reports false if ctx ended first.
func (r *Runnable) wait(ctx context.Context) bool {
	t := r.Clock.NewTimer(r.Period)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
