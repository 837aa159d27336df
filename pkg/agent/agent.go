package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// Config is the agent's configuration (its flags).
type Config struct {
	// Node is the node the agent runs on (the pods' spec.nodeName).
	Node string
	// PodLogsDir is the kubelet's podLogsDir (/var/log/pods).
	PodLogsDir string
	// MaxHeldBytes bounds the bytes of deleted log files the agent holds open (0: no bound).
	MaxHeldBytes int64
	// HeartbeatInterval is how often the agent records that it is alive; the archiver takes its
	// runs over once it has not for three intervals (db: 15 s).
	HeartbeatInterval time.Duration
	// Poll is how often the agent reads its runs from the database.
	Poll time.Duration
	// UnownedGrace is how long the files of a run that the agent does not own stay held once one
	// of them is deleted from the disk (the archiver may not have claimed the run yet).
	UnownedGrace time.Duration
	// StoreDownGrace is how long every run's stores may fail before the agent stops beating: the
	// store down for the agent is most often down for the archiver too, and the agent holds the
	// files (a deleted pod's included) that the API capture could not read.
	StoreDownGrace time.Duration
	// Capture tunes the captures (NodeLogMaxSize is ignored: the files hold every byte).
	Capture capture.Config
	Layout  archive.Layout
}

// DefaultConfig is the agent's configuration unless told otherwise.
func DefaultConfig() Config {
	return Config{PodLogsDir: "/var/log/pods", HeartbeatInterval: db.HeartbeatInterval, Poll: 2 * time.Second, UnownedGrace: 5 * time.Minute, StoreDownGrace: 5 * time.Minute,
		Capture: capture.DefaultConfig}
}

// BindFlags registers the agent's own flags on fs.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Node, "node", c.Node, "The node the agent runs on (from the downward API: spec.nodeName). Required.")
	fs.StringVar(&c.PodLogsDir, "pod-logs-dir", c.PodLogsDir, "The kubelet's podLogsDir, mounted read-only.")
	fs.Int64Var(&c.MaxHeldBytes, "agent-max-held-bytes", c.MaxHeldBytes, "Bytes of log files deleted from the node's disk (rotated away or collected) that the agent may keep open until their bytes are stored; past it the oldest is let go and its unread rest recorded as a gap ('released by agent: held-bytes limit'). 0: no bound.")
	fs.DurationVar(&c.HeartbeatInterval, "agent-heartbeat-interval", c.HeartbeatInterval, fmt.Sprintf("How often the agent records that it is alive, at most %s; the archiver takes its runs over once it has not for %s. The agent records none while it cannot read its runs (its last 3 reads failed), or cannot store any run (each run's last 3 stores failed, for --agent-store-down-grace).", db.HeartbeatInterval, db.AgentHealthyWithin))
	fs.DurationVar(&c.StoreDownGrace, "agent-store-down-grace", c.StoreDownGrace, "How long the stores of every run the agent captures may fail (3 in a row each) before it stops recording its heartbeat, so that the archiver takes its runs over. Meanwhile it holds their files, a deleted pod's included, and stores them once the store is back: a store down for the agent is most often down for the archiver too. One run failing alone never stops the heartbeat.")
	fs.DurationVar(&c.Poll, "agent-poll", c.Poll, "How often the agent reads the runs it owns from the database.")
	fs.Int64Var(&c.Capture.SegmentBytes, "capture-segment-bytes", c.Capture.SegmentBytes, "A log is stored in segments of about this many uncompressed bytes.")
	fs.DurationVar(&c.Capture.SegmentAge, "capture-segment-age", c.Capture.SegmentAge, "A log's segment is stored once this old, however small.")
	c.Layout.BindFlags(fs)
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if c.Node == "" {
		errs = append(errs, errors.New("--node is required"))
	}
	if c.PodLogsDir == "" {
		errs = append(errs, errors.New("--pod-logs-dir is required"))
	}
	if c.MaxHeldBytes < 0 {
		errs = append(errs, fmt.Errorf("--agent-max-held-bytes must not be negative, got %d", c.MaxHeldBytes))
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval > db.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("--agent-heartbeat-interval must be positive and at most %s (the archiver's health window is %s), got %s", db.HeartbeatInterval, db.AgentHealthyWithin, c.HeartbeatInterval))
	}
	if c.Poll <= 0 {
		errs = append(errs, fmt.Errorf("--agent-poll must be positive, got %s", c.Poll))
	}
	if c.Capture.SegmentBytes <= 0 || c.Capture.SegmentAge <= 0 {
		errs = append(errs, errors.New("--capture-segment-bytes and --capture-segment-age must be positive"))
	}
	return errors.Join(append(errs, c.Layout.Validate())...)
}

// DB is what the agent keeps in the database (implemented by *db.DB, with the jobvault_agent role).
type DB interface {
	Heartbeat(ctx context.Context, node string, heldBytes int64) error
	AgentRuns(ctx context.Context, node string) ([]db.AgentRun, error)
	CompleteRun(ctx context.Context, k db.RunKey) error
	ReleaseRun(ctx context.Context, k db.RunKey, why string) error
	AgentRecords(node string) db.AgentRecords
}

// Agent captures the logs of the runs it owns on its node from their files.
type Agent struct {
	cfg   Config
	db    DB
	store objstore.Store
	log   logr.Logger
	src   *FileSource

	// recs are the agent's fenced records (db.AgentRecords of its node).
	recs capture.Records

	mu       sync.Mutex
	captures map[db.RunKey]*ownedRun
	// notes are the gaps of files let go that are not recorded yet, by run: the run was not
	// claimed yet (the write is fenced by its owner) or the database failed. They are recorded
	// once the agent owns the run (poll, and before the run is completed).
	notes map[db.RunKey][]record.Gap
	// beat is when the last heartbeat was recorded (zero: none yet), for /healthz.
	beat time.Time
	// storeFails counts, by run, the captures that failed to store in a row, and since when, and
	// runsFails the reads of the agent's runs that failed in a row (canStore).
	storeFails map[db.RunKey]failures
	runsFails  int
}

// failures are a run's stores that failed in a row: how many, since when.
type failures struct {
	n     int
	since time.Time
}

// maxFails is how many segment stores of each run the agent captures (for StoreDownGrace), or
// reads of its runs, may fail in a row before the agent stops beating, so that the archiver takes
// its runs over in 15 s rather than at --log-deadline. A failure counts against what failed: one
// run's stores failing while another run stores (its segment refused, say) are that run's
// trouble, retried, not the node's; the heartbeat stops when every run captured has failed for
// the grace (the store is down for the agent, and stays down), or the agent cannot read its runs
// (the database is).
const maxFails = 3

// ownedRun is a run the agent captures: over once the archiver said so.
type ownedRun struct {
	mu   sync.Mutex
	over bool
	// cancel stops the capture: the run is no longer the agent's (taken over).
	cancel context.CancelFunc
}

// New makes an agent; Run starts it.
func New(cfg Config, records DB, store objstore.Store, log logr.Logger) (*Agent, error) {
	switch {
	case records == nil:
		return nil, errors.New("new agent: records is nil")
	case store == nil:
		return nil, errors.New("new agent: store is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, db: records, recs: records.AgentRecords(cfg.Node), store: store, log: log,
		captures: map[db.RunKey]*ownedRun{}, notes: map[db.RunKey][]record.Gap{}, storeFails: map[db.RunKey]failures{}}
	src, err := NewFileSource(cfg.PodLogsDir, cfg.MaxHeldBytes, a.letGo, log.WithName("files"))
	if err != nil {
		return nil, err
	}
	src.onGap = a.noteGap
	a.src = src
	return a, nil
}

// Run runs the agent until ctx ends: the file source, the heartbeat, and a capture per run it owns.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcErr := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); srcErr <- a.src.Run(ctx) }()
	heldLimit.Set(float64(a.cfg.MaxHeldBytes))
	a.heartbeat(ctx)
	beat := time.NewTicker(a.cfg.HeartbeatInterval)
	defer beat.Stop()
	poll := time.NewTicker(a.cfg.Poll)
	defer poll.Stop()
	a.poll(ctx, &wg)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-srcErr:
			return err
		case <-beat.C:
			a.heartbeat(ctx)
		case <-poll.C:
			a.poll(ctx, &wg)
		}
	}
}

// Healthy reports whether the agent recorded a heartbeat within three intervals (/healthz).
func (a *Agent) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.beat.IsZero() || time.Since(a.beat) > 3*a.cfg.HeartbeatInterval {
		return fmt.Errorf("no heartbeat recorded since %s", a.beat.Format(time.RFC3339))
	}
	return nil
}

func (a *Agent) heartbeat(ctx context.Context) {
	if err := a.canStore(); err != nil {
		heartbeatsFailed.Inc()
		a.log.Error(err, "Not recording the heartbeat: the archiver is to take the runs over")
		return
	}
	held := a.src.Held()
	if err := a.db.Heartbeat(ctx, a.cfg.Node, held); err != nil {
		heartbeatsFailed.Inc()
		a.log.Error(err, "Recording the heartbeat failed")
		return
	}
	a.mu.Lock()
	a.beat = time.Now()
	a.mu.Unlock()
}

// canStore reports whether the agent can store what it captures: a heartbeat says so.
func (a *Agent) canStore() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runsFails >= maxFails {
		return fmt.Errorf("the last %d reads of the agent's runs failed", a.runsFails)
	}
	failing := 0
	for k := range a.captures {
		if f := a.storeFails[k]; f.n >= maxFails && time.Since(f.since) >= a.cfg.StoreDownGrace {
			failing++
		}
	}
	if failing > 0 && failing == len(a.captures) {
		return fmt.Errorf("the last %d or more stores of each of the agent's %d captures failed, for %s or more", maxFails, failing, a.cfg.StoreDownGrace)
	}
	return nil
}

// failed is how many times in a row run k failed to store (a.mu held).
func (a *Agent) failed(k db.RunKey) int { return a.storeFails[k].n }

// stored counts a store of run k that succeeded (ok) or failed, in a row.
func (a *Agent) stored(k db.RunKey, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ok {
		delete(a.storeFails, k)
		return
	}
	f := a.storeFails[k]
	if f.n == 0 {
		f.since = time.Now()
	}
	f.n++
	a.storeFails[k] = f
}

// poll reads the runs the agent owns: it starts a capture for each new one, tells those over, and
// forgets the files of runs it does not own that are gone from the disk.
func (a *Agent) poll(ctx context.Context, wg *sync.WaitGroup) {
	runs, err := a.db.AgentRuns(ctx, a.cfg.Node)
	a.mu.Lock()
	if err != nil {
		a.runsFails++
	} else {
		a.runsFails = 0
	}
	a.mu.Unlock()
	if err != nil {
		a.log.Error(err, "Reading the agent's runs failed")
		return
	}
	owned := a.start(ctx, wg, runs)
	for k := range owned {
		if err := a.recordNotes(ctx, db.RunKey(k)); err != nil {
			a.log.Error(err, "Recording the gap of a file let go failed, will retry")
		}
	}
	a.src.forgetUnowned(owned, a.cfg.UnownedGrace)
	a.dropNotes(owned)
}

// start starts a capture for each run not captured yet and tells those over; it returns the runs
// owned.
func (a *Agent) start(ctx context.Context, wg *sync.WaitGroup, runs []db.AgentRun) map[RunKey]bool {
	owned := map[RunKey]bool{}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range runs {
		owned[RunKey(r.RunKey)] = true
		if o := a.captures[r.RunKey]; o != nil {
			o.mu.Lock()
			o.over = o.over || r.Over
			o.mu.Unlock()
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		o := &ownedRun{over: r.Over, cancel: cancel}
		a.captures[r.RunKey] = o
		capturesRunning.Inc()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer capturesRunning.Dec()
			defer cancel()
			a.captureRun(rctx, r, o)
			if ctx.Err() == nil && rctx.Err() != nil {
				a.src.Forget(RunKey(r.RunKey)) // taken over: its files are the API capture's concern
			}
			a.mu.Lock()
			delete(a.captures, r.RunKey)
			delete(a.storeFails, r.RunKey)
			a.mu.Unlock()
		}()
	}
	// A run captured that is no longer listed was taken over (or completed, its capture then
	// done already): its capture stops and its files are closed, rather than being refused at its
	// next write only.
	for k, o := range a.captures {
		if !owned[RunKey(k)] {
			a.log.Info("Run no longer the agent's; stopping its capture", "run", k.String())
			o.cancel()
		}
	}
	return owned
}

// captureRun captures one owned run from its files until it is complete, or no longer the agent's.
func (a *Agent) captureRun(ctx context.Context, r db.AgentRun, o *ownedRun) {
	ref := capture.Ref{Namespace: r.Namespace, Pod: r.Pod, PodUID: r.PodUID, Container: r.Container, Run: r.Run}
	log := a.log.WithValues("run", ref.String())
	ctx = logr.NewContext(ctx, log)
	job := archive.JobRef{Namespace: r.Namespace, Name: r.JobName, UID: r.JobUID}
	if _, err := a.cfg.Layout.Segment(job, ref.Pod, ref.PodUID, ref.Container, ref.Run, 0); err != nil {
		a.release(ctx, r.RunKey, "no valid key: "+err.Error())
		return
	}
	// The agent's segment keys differ from the API capture's: after a take-over the archiver
	// stores its segment seq under its own key while an upload of the agent's may be in flight
	// (its record is then refused, but its object must not replace the archiver's).
	segKey := func(seq int32) string {
		key, _ := a.cfg.Layout.Segment(job, ref.Pod, ref.PodUID, ref.Container, ref.Run, seq)
		return key + ".agent"
	}
	over := func(context.Context) (capture.End, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		return capture.End{Over: o.over}, nil
	}
	cfg := a.cfg.Capture
	cfg.NodeLogMaxSize = 0 // no guessing what rotation took: the files hold every byte
	recs := a.src.Records(countedRecords{Records: a.recs, a: a})
	k := RunKey(r.RunKey)
	retry := time.Second
	for {
		// final is nil: the archiver assembles the agent's runs from their segments.
		_, err := capture.Capture(ctx, cfg, a.src, recs, a.store, segKey, ref, over, nil)
		var unread *capture.ReadError
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, db.ErrNotOwner):
			log.Info("Run no longer the agent's; dropping it")
			a.src.Forget(k)
			return
		case err == nil:
			if err = a.recordNotes(ctx, r.RunKey); err == nil {
				err = a.complete(ctx, r.RunKey)
			}
			if err == nil || errors.Is(err, db.ErrNotOwner) {
				a.src.Forget(k)
				return
			}
		case errors.As(err, &unread):
			// No file of the run is held: it was collected before the agent saw it (the agent
			// was down). What was captured is stored; the rest is a gap, and the run complete.
			err = a.lost(ctx, recs, r.RunKey, unread)
			if err == nil {
				continue
			}
		}
		captureFailures.Inc()
		a.stored(r.RunKey, false)
		log.Error(err, "Capture failed, will retry")
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, 30*time.Second)
	}
}

func (a *Agent) complete(ctx context.Context, k db.RunKey) error {
	if err := a.db.CompleteRun(ctx, k); err != nil {
		return fmt.Errorf("complete %s: %w", k, err)
	}
	runsCompleted.Inc()
	return nil
}

// lost records a gap for the rest of a run the node holds no file of.
func (a *Agent) lost(ctx context.Context, recs capture.Records, k db.RunKey, unread *capture.ReadError) error {
	g := record.Gap{PodUID: k.PodUID, Container: k.Container, Run: k.Run, Reason: record.GapCollected,
		Detail: "the node agent found no log file of the run: " + unread.Err.Error()}
	segs, err := recs.Segments(ctx, k.PodUID, k.Container, k.Run)
	if err != nil {
		return err
	}
	if n := len(segs); n > 0 {
		g.After = segs[n-1].LastTime
	}
	if err := recs.PutGap(ctx, g); err != nil {
		return err
	}
	if err := a.recordNotes(ctx, k); err != nil {
		return err
	}
	return a.complete(ctx, k)
}

// release gives a run up to the API capture.
func (a *Agent) release(ctx context.Context, k db.RunKey, why string) {
	if err := a.db.ReleaseRun(ctx, k, why); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Giving the run up failed")
	}
	a.src.Forget(RunKey(k))
}

// countedRecords counts each segment recorded (Agent.stored).
type countedRecords struct {
	capture.Records
	a *Agent
}

func (c countedRecords) PutSegment(ctx context.Context, seg record.Segment) error {
	err := c.Records.PutSegment(ctx, seg)
	if err == nil {
		c.a.stored(db.RunKey{PodUID: seg.PodUID, Container: seg.Container, Run: seg.Run}, true)
	}
	return err
}

// letGo records the gap of a file let go past the held-bytes limit.
func (a *Agent) letGo(k RunKey, lg LetGo) {
	g := record.Gap{PodUID: k.PodUID, Container: k.Container, Run: k.Run, After: lg.After, Before: lg.Before, Reason: record.GapAgentLetGo,
		Detail: fmt.Sprintf("file %s (%d bytes, %d of them not read yet, deleted from the node's disk) let go at the agent's held-bytes limit of %d before its bytes were stored", lg.Name, lg.Size, lg.Unread, a.cfg.MaxHeldBytes)}
	a.noteGap(k, g)
}

// noteGap records a gap the file source found, keeping it noted until recorded (recordNotes).
func (a *Agent) noteGap(k RunKey, g record.Gap) {
	key := db.RunKey(k)
	a.mu.Lock()
	a.notes[key] = append(a.notes[key], g)
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch err := a.recordNotes(ctx, key); {
	case errors.Is(err, db.ErrNotOwner):
		a.log.Info("A gap belongs to a run not claimed by the agent (yet): it is kept until it is", "run", k.String(), "gap", g.Detail)
	case err != nil:
		a.log.Error(err, "Recording a gap failed, will retry", "run", k.String())
	}
}

// recordNotes records the gaps noted for run k (files let go or truncated); those not recorded
// stay noted.
func (a *Agent) recordNotes(ctx context.Context, k db.RunKey) error {
	a.mu.Lock()
	gs := a.notes[k]
	delete(a.notes, k)
	a.mu.Unlock()
	for i, g := range gs {
		if err := a.recs.PutGap(ctx, g); err != nil {
			a.mu.Lock()
			a.notes[k] = append(gs[i:], a.notes[k]...)
			a.mu.Unlock()
			return fmt.Errorf("record a gap of %s: %w", k, err)
		}
	}
	return nil
}

// dropNotes drops the notes of runs that are not the agent's and whose files it forgot (the API
// captures them, or they are complete): their gaps cannot be recorded by the agent. Said, not
// silent.
func (a *Agent) dropNotes(owned map[RunKey]bool) {
	held := map[RunKey]bool{}
	for _, k := range a.src.Runs() {
		held[k] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, gs := range a.notes {
		if owned[RunKey(k)] || held[RunKey(k)] {
			continue
		}
		for _, g := range gs {
			a.log.Error(errors.New("run not the agent's"), "A gap cannot be recorded by the agent", "run", k.String(), "gap", g.Detail)
		}
		delete(a.notes, k)
	}
}

var (
	heldBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jobvault_agent_held_bytes",
		Help: "Bytes of log files deleted from the node's disk (rotated away or collected) that the agent holds open until their bytes are stored."})
	heldLimit = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jobvault_agent_held_bytes_limit",
		Help: "The agent's --agent-max-held-bytes (0: no bound)."})
	filesLetGo = prometheus.NewCounter(prometheus.CounterOpts{Name: "jobvault_agent_files_let_go_total",
		Help: "Log files the agent let go at its held-bytes limit before their bytes were stored (each recorded as a gap)."})
	heartbeatsFailed = prometheus.NewCounter(prometheus.CounterOpts{Name: "jobvault_agent_heartbeats_failed_total",
		Help: "Heartbeats the agent could not record (the archiver takes its runs over after 15 s without one)."})
	filesHeld = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jobvault_agent_files_held_total",
		Help: "Log files the agent took and held open, by kind: current, rotated (found already rotated) or compressed (found only compressed: read decompressed)."}, []string{"kind"})
	capturesRunning = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jobvault_agent_captures",
		Help: "Runs the agent is capturing."})
	runsCompleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "jobvault_agent_runs_completed_total",
		Help: "Runs the agent captured completely and marked complete."})
	captureFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "jobvault_agent_capture_failures_total",
		Help: "Captures that failed and are retried (the store or the database)."})
)

// Register registers the agent's metrics on reg.
func Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{heldBytes, heldLimit, filesLetGo, heartbeatsFailed, filesHeld, capturesRunning, runsCompleted, captureFailures} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register agent metrics: %w", err)
		}
	}
	return nil
}
