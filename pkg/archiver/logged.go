package archiver

import (
	"context"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
)

// loggedRuns remembers, by pod, the log rows of its container runs this process recorded or
// found recorded (a capture's start reads its run's row, db.StartRuns), and whether it marked the
// pod archived with the last of them (db.RecordRunLog). A pod's reconcile that finds every run of
// the pod here reads nothing: at most two transactions per pod of one short log (issue 28), where
// reading the pod's rows at each reconcile and marking it archived apart were four more. A run
// not remembered costs its capture's start, which finds its row and stops: a restart, or a pod
// forgotten, costs that, never a wrong record, as every row is written by an idempotent upsert.
// Rows change only forward (a stored row is final; an unavailable one only becomes stored, through
// recordRun here), so what is remembered stays true. Entries are forgotten when the pod is
// released or gone. The zero value is ready to use.
type loggedRuns struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*podLogged
}

// podLogged is what loggedRuns remembers of one pod (uid: a pod recreated under its name starts
// over).
type podLogged struct {
	uid      types.UID
	rows     map[string]record.LogObject // by logName
	archived bool
}

func logName(container, instance string) string { return container + "/" + instance }

// entry is the pod's entry, made if missing or of another pod of that name; under mu.
func (l *loggedRuns) entry(pod types.NamespacedName, uid types.UID) *podLogged {
	if l.m == nil {
		l.m = map[types.NamespacedName]*podLogged{}
	}
	e := l.m[pod]
	if e == nil || e.uid != uid {
		e = &podLogged{uid: uid, rows: map[string]record.LogObject{}}
		l.m[pod] = e
	}
	return e
}

// add remembers a row recorded (or found recorded) of the pod's; archived, that the pod was marked
// archived with it.
func (l *loggedRuns) add(pod types.NamespacedName, uid types.UID, row record.LogObject, archived bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(pod, uid)
	e.rows[logName(row.Container, row.Instance)] = row
	e.archived = e.archived || archived
}

// known returns the remembered rows of the pod by logName (a copy), and whether it was marked
// archived.
func (l *loggedRuns) known(pod types.NamespacedName, uid types.UID) (rows map[string]record.LogObject, archived bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[pod]
	if e == nil || e.uid != uid {
		return nil, false
	}
	rows = make(map[string]record.LogObject, len(e.rows))
	for k, v := range e.rows {
		rows[k] = v
	}
	return rows, e.archived
}

// forget drops what is remembered of the pod under that name.
func (l *loggedRuns) forget(pod types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, pod)
}

// runRecords is the capture.Records of one run's capture started by db.StartRuns: its first read
// of the run's segments is answered from what its start read in its transaction, and the gaps it
// records are remembered beside those its start found, so that recording its log needs no read of
// them. Only the run's own capture writes its segments and gaps (an agent's run is not given one).
type runRecords struct {
	capture.Records
	mu       sync.Mutex
	segments []record.Segment
	served   bool
	gaps     []record.Gap
	// unsure: a gap's write failed, so whether it is recorded is not known; the gaps are read.
	unsure bool
}

// Segments answers the run's first read from StartRun's, later ones from the database.
func (r *runRecords) Segments(ctx context.Context, podUID, container string, run int32) ([]record.Segment, error) {
	r.mu.Lock()
	if !r.served {
		r.served = true
		segs := r.segments
		r.mu.Unlock()
		return segs, nil
	}
	r.mu.Unlock()
	return r.Records.Segments(ctx, podUID, container, run)
}

// PutGap records the gap, and remembers it.
func (r *runRecords) PutGap(ctx context.Context, g record.Gap) error {
	err := r.Records.PutGap(ctx, g)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.unsure = true
		return err
	}
	r.gaps = append(r.gaps, g)
	return nil
}

// knownGaps are the run's recorded gaps, each once, ordered as the database orders them, with
// g too if set; ok is false when they are not known for sure (then they are read).
func (r *runRecords) knownGaps(g *record.Gap) (gaps []record.Gap, ok bool) {
	if r == nil {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unsure {
		return nil, false
	}
	all := slices.Clone(r.gaps)
	if g != nil {
		all = append(all, *g)
	}
	// The database keeps one gap per (after, reason, before) (PutGap), ordered by after and then
	// as recorded.
	type key struct {
		after, before int64
		reason        record.GapReason
	}
	seen := map[key]bool{}
	all = slices.DeleteFunc(all, func(g record.Gap) bool {
		k := key{g.After.UnixNano(), g.Before.UnixNano(), g.Reason}
		if seen[k] {
			return true
		}
		seen[k] = true
		return false
	})
	slices.SortStableFunc(all, func(a, b record.Gap) int { return a.After.Compare(b.After) })
	return all, true
}

// sealRecords are the Sealer's records for one seal of one job: the seal's reads of the job's
// chain entry and rows are answered from one transaction (db.JobForSeal), read at the first of
// them, instead of six. The seal's finalizing transaction checks, with the rows locked, that they
// are still those it read (db.FinalizeJob), so rows written after the read fail the seal, which
// is tried again, never sealed stale.
type sealRecords struct {
	Records
	uid  string
	read *db.SealRead
}

// fetch reads the job's record once.
func (s *sealRecords) fetch(ctx context.Context, uid string) (*db.SealRead, error) {
	if uid != s.uid {
		return nil, nil
	}
	if s.read == nil {
		read, err := s.Records.JobForSeal(ctx, uid)
		if err != nil {
			return nil, err
		}
		s.read = &read
	}
	return s.read, nil
}

// fromRead answers a read of job uid from the seal's read (pick), or, for another job, from the
// database (direct).
func fromRead[T any](ctx context.Context, s *sealRecords, uid string, pick func(*db.SealRead) T, direct func() (T, error)) (T, error) {
	read, err := s.fetch(ctx, uid)
	switch {
	case err != nil:
		var zero T
		return zero, err
	case read == nil:
		return direct()
	}
	return pick(read), nil
}

// ChainEntry is the job's chain entry as read with its rows.
func (s *sealRecords) ChainEntry(ctx context.Context, uid string) (record.ChainEntry, bool, error) {
	type entry struct {
		e       record.ChainEntry
		chained bool
	}
	got, err := fromRead(ctx, s, uid, func(r *db.SealRead) entry { return entry{r.Entry, r.Chained} }, func() (entry, error) {
		e, chained, err := s.Records.ChainEntry(ctx, uid)
		return entry{e, chained}, err
	})
	return got.e, got.chained, err
}

// Job is the job's row as read.
func (s *sealRecords) Job(ctx context.Context, uid string) (record.Job, error) {
	return fromRead(ctx, s, uid, func(r *db.SealRead) record.Job { return r.Rows.Job }, func() (record.Job, error) { return s.Records.Job(ctx, uid) })
}

// Transitions are the job's transitions as read.
func (s *sealRecords) Transitions(ctx context.Context, uid string) ([]record.Transition, error) {
	return fromRead(ctx, s, uid, func(r *db.SealRead) []record.Transition { return r.Rows.Transitions },
		func() ([]record.Transition, error) { return s.Records.Transitions(ctx, uid) })
}

// Pods are the job's pods as read.
func (s *sealRecords) Pods(ctx context.Context, uid string) ([]record.Pod, error) {
	return fromRead(ctx, s, uid, func(r *db.SealRead) []record.Pod { return r.Rows.Pods }, func() ([]record.Pod, error) { return s.Records.Pods(ctx, uid) })
}

// LogObjects are the job's log rows as read.
func (s *sealRecords) LogObjects(ctx context.Context, uid string) ([]record.LogObject, error) {
	return fromRead(ctx, s, uid, func(r *db.SealRead) []record.LogObject { return r.Rows.Logs },
		func() ([]record.LogObject, error) { return s.Records.LogObjects(ctx, uid) })
}

// Gaps are the job's gaps as read.
func (s *sealRecords) Gaps(ctx context.Context, uid string) ([]record.Gap, error) {
	return fromRead(ctx, s, uid, func(r *db.SealRead) []record.Gap { return r.Rows.Gaps }, func() ([]record.Gap, error) { return s.Records.Gaps(ctx, uid) })
}
