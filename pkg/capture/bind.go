package capture

import (
	"context"
	"fmt"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// A read of pods/log does not say which container served it: the node picks the container as the
// read opens, by its own status, which the API's lags. A read opened for a run whose status shows
// no restart yet may be served the container's next run. So each read is bound to the run before
// its lines are kept, by two rules:
//
//   - A read is the run's if it delivers again a line captured already (the same container), or
//     if no later run can have served it: it was opened, or gave a line stamped, before the
//     earliest instant a later run exists (End.Limit, from the status), or no later run can exist
//     (End.Final). A read that does neither once the status gives the limit is another run's: its
//     lines are not stored, and a GapOtherRun gap says that the run's own output is missing.
//   - While the status shows no later run, a read's lines are held, not stored, until a status
//     read at least Config.Settle after the read opened still shows none: the later run's
//     container would show in it by then.

// binding is what binds the read being read to the run.
type binding struct {
	// bound: the read is the run's; foreign: another run's, whose lines are dropped.
	bound, foreign bool
	// openedAt is when the read was answered (the node had chosen its container).
	openedAt time.Time
	// What the status told: the limit, that no later run can exist, the run's container.
	limit time.Time
	final bool
	id    string
	// pending holds the read's pieces of lines while it is not bound yet.
	pending      []line
	pendingBytes int64
	// ahead is how far ahead of the archiver's clock the node's was seen to be (lines stamped
	// after they arrived), so that an open time compares with the node's stamps. low is the same
	// measure unclamped, once a line was seen (seen): the node's clock is at least low ahead
	// (behind, if negative), whatever the lines' delay.
	ahead time.Duration
	low   time.Duration
	seen  bool
	// gapped: the GapOtherRun gap is recorded.
	gapped bool
}

// opened starts the binding of a new read, answered at.
func (b *binding) opened(at time.Time) {
	b.bound, b.foreign, b.openedAt = b.final, false, at
}

// sawLine notes a line of a follow stream arriving now: its stamp tells how far ahead the node's
// clock may be.
func (b *binding) sawLine(l line) {
	ahead := time.Until(l.ts)
	if ahead > b.ahead {
		b.ahead = ahead
	}
	if !b.seen || ahead > b.low {
		b.low, b.seen = ahead, true
	}
}

// before reports whether the read was opened, or l stamped, before the limit.
func (b *binding) before(l line) bool {
	return !b.limit.IsZero() && (l.start && l.ts.Before(b.limit) || b.openedAt.Add(b.ahead).Before(b.limit))
}

// hold takes a piece of a line of the read first: it reports true when the piece is held or
// dropped (not the run's, or not known to be yet), false when the read is the run's and the
// piece is to be added.
func (c *capture) hold(ctx context.Context, l line) (bool, error) {
	b := &c.bind
	switch {
	case b.bound:
		return false, nil
	case b.foreign:
		return true, nil
	case l.start && (b.final || b.before(l) || c.seen.find(l, 0) >= 0):
		return false, c.bindRead(ctx)
	case l.start && !b.limit.IsZero():
		return true, c.otherRun(ctx, l)
	}
	b.pending = append(b.pending, l)
	b.pendingBytes += int64(len(l.data))
	return true, nil
}

// bindRead makes the read the run's, and adds what it held.
func (c *capture) bindRead(ctx context.Context) error {
	b := &c.bind
	b.bound = true
	held := b.pending
	b.pending, b.pendingBytes = nil, 0
	for _, l := range held {
		if err := c.add(ctx, l); err != nil {
			return err
		}
	}
	return nil
}

// otherRun drops the read, served another run from l on, and records that the run's own output
// from the durable position on is missing, once.
func (c *capture) otherRun(ctx context.Context, l line) error {
	b := &c.bind
	b.foreign, b.pending, b.pendingBytes = true, nil, 0
	if b.gapped {
		return nil
	}
	b.gapped = true
	return c.gap(ctx, time.Time{}, record.GapOtherRun,
		fmt.Sprintf("a read opened at %s was served lines stamped from %s on, not before %s, the earliest a later run of the container can have written one: another run's; they were not stored",
			b.openedAt.UTC().Format(time.RFC3339Nano), l.ts.UTC().Format(time.RFC3339Nano), b.limit.UTC().Format(time.RFC3339)))
}

// judge takes what the status tells of the run's binding and decides the lines held, if it can
// (see above). A status that names another container for the run than before makes the run over,
// lost with GapOtherRun.
func (c *capture) judge(ctx context.Context, end End) (End, error) {
	b := &c.bind
	if end.ContainerID != "" {
		if b.id == "" {
			b.id = end.ContainerID
		} else if end.ContainerID != b.id {
			b.pending, b.pendingBytes, b.foreign = nil, 0, true
			end.Over, end.Lost = true, record.GapOtherRun
			return end, nil
		}
	}
	if !end.Limit.IsZero() {
		b.limit = end.Limit
	}
	b.final = b.final || end.Final
	if len(b.pending) == 0 || b.bound || b.foreign {
		return end, nil
	}
	switch {
	case b.final || b.limit.IsZero() && time.Since(b.openedAt) >= c.cfg.Settle:
		return end, c.bindRead(ctx)
	case !b.limit.IsZero():
		for _, l := range b.pending {
			if b.before(l) {
				return end, c.bindRead(ctx)
			}
		}
		return end, c.otherRun(ctx, b.pending[0])
	}
	return end, nil
}

// settle decides the lines the last read holds before another read opens: it reads the status
// until they are bound or dropped (at most Settle after the read opened, or the run ends).
func (c *capture) settle(ctx context.Context, over func(context.Context) (End, error)) error {
	for len(c.bind.pending) > 0 && !c.bind.bound && !c.bind.foreign {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(c.cfg.Poll, max(0, c.cfg.Settle-time.Since(c.bind.openedAt)))):
		case <-c.changed:
		}
		end, err := over(ctx)
		if err != nil {
			return err
		}
		if end, err = c.judge(ctx, end); err != nil {
			return err
		} else if end.Lost != "" {
			c.bind.pending, c.bind.pendingBytes = nil, 0
		}
	}
	return nil
}
