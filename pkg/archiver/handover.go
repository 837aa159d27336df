package archiver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// RunOwners is what the archiver needs of the database to share container runs with the node
// agents (implemented by *db.DB; see db.ClaimRun): one owner per run, and which capture stored
// which bytes.
type RunOwners interface {
	ClaimRun(ctx context.Context, c db.RunClaim, healthyWithin time.Duration) (owner string, first bool, err error)
	Run(ctx context.Context, k db.RunKey, healthyWithin time.Duration) (db.LogRun, error)
	EndRun(ctx context.Context, k db.RunKey) error
	TakeOverRun(ctx context.Context, k db.RunKey, why string) (bool, error)
	PutSources(ctx context.Context, ranges []record.SourceRange) error
}

// startRun starts the run's capture: it claims the run (its owner, see db.ClaimRun) and reads its
// log row, gaps and segments, in one transaction (db.StartRuns), retried until it succeeds. It
// reports done when the run's log is recorded already (or ctx ended): a pod's reconcile that did
// not know the run recorded (loggedRuns), or asked for its capture after one that recorded it had
// ended, starts it again, and captured again its final object would be written again, a second
// version that Object Lock keeps on a versioned bucket (and, once its segments are forgotten, an
// empty log written over an assembled one, or an unavailable row over a stored one).
//
// The first attempt goes with the other starts of the job's runs (jobStarts, startSiblings); pre,
// when set, is this run's start as another capture reads it (startSiblings). A failed one is
// retried alone.
func (r *PodReconciler) startRun(ctx context.Context, log logr.Logger, job archive.JobRef, ref capture.Ref, pre *startedRun) (db.RunStart, bool) {
	claim := db.RunClaim{RunKey: db.RunKey{PodUID: ref.PodUID, Container: ref.Container, Run: ref.Run},
		Namespace: ref.Namespace, Pod: ref.Pod, JobName: job.Name, JobUID: job.UID}
	pod, _ := r.runPod(ctx, ref)
	if pod != nil {
		claim.Node = pod.Spec.NodeName
	}
	// The name the run's log is recorded under now (runInstance, as recordRun names it).
	instance := func() (string, error) {
		end, _, err := r.runEnd(ctx, ref)
		return runInstance(ref, end.Previous || end.Lost == record.GapRestarted), err
	}
	if pre != nil {
		select {
		case <-ctx.Done():
			return db.RunStart{}, true
		case <-pre.done:
		}
	} else if name, err := instance(); err == nil {
		pre = &startedRun{run: db.RunToStart{RunClaim: claim, Instance: name}, done: make(chan struct{})}
		r.startWithJob(ctx, job.UID, pre, func() []*startedRun {
			if pod == nil || !podEnded(pod) {
				return nil // a running pod's siblings have their captures, or will when they end
			}
			return r.startSiblings(ctx, job, ref)
		})
	}
	if pre != nil && pre.ok {
		return r.started(pod, pre.start)
	}
	if ctx.Err() != nil {
		return db.RunStart{}, true // stopped while its start waited: nothing to retry
	}
	for retry := time.Second; ; {
		name, err := instance()
		var starts []db.RunStart
		if err == nil {
			starts, err = r.Records.StartRuns(ctx, []db.RunToStart{{RunClaim: claim, Instance: name}}, db.AgentHealthyWithin)
		}
		if err == nil {
			countClaims(starts)
			return r.started(pod, starts[0])
		}
		archiveFailuresTotal.WithLabelValues("database").Inc()
		log.Error(err, "Starting the run's capture failed, will retry")
		if !r.pause(ctx, &retry) {
			return db.RunStart{}, true
		}
	}
}

// started takes a run's start (startRun): done if its log is recorded already.
func (r *PodReconciler) started(pod *corev1.Pod, start db.RunStart) (db.RunStart, bool) {
	if start.Recorded != nil {
		if pod != nil {
			r.logged.add(client.ObjectKeyFromObject(pod), pod.UID, *start.Recorded, false)
		}
		return start, true
	}
	return start, false
}

// countClaims counts the runs these starts claimed first: once per run, whether or not a capture
// takes its start (startSiblings), not per capture restart.
func countClaims(starts []db.RunStart) {
	for _, s := range starts {
		if s.First {
			runsClaimedTotal.WithLabelValues(s.Owner).Inc()
		}
	}
}

// startedRun is one run's start in a transaction of several (startTogether): ok once read, done
// closed either way, or closed with next set for the start to run that batch, itself first.
type startedRun struct {
	run   db.RunToStart
	done  chan struct{}
	start db.RunStart
	ok    bool
	next  []*startedRun
	// sibling: read for a capture that may still wait for a slot (startSiblings).
	sibling bool
}

// jobStarts queues the starts of each job's runs, so that the runs of a job's pods that end
// together are claimed and read in a few transactions, not one each (issue 28): a start that finds
// one of its job's in flight waits, and the starts queued meanwhile go together in the next
// transaction, which the first of them runs (group commit, per job: one tenant's starts never wait
// for another's). Each waits for at most the transactions queued before it, each bounded by the
// database's timeout. The zero value is ready to use.
type jobStarts struct {
	mu sync.Mutex
	// queued holds a job's starts waiting for the next transaction; a job is in it while one of
	// its transactions runs.
	queued map[string][]*startedRun
}

// leave takes s out of the job's queue if it still waits there (true); false when a transaction
// took it already, or handed it the next one to run.
func (j *jobStarts) leave(jobUID string, s *startedRun) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	q := j.queued[jobUID]
	i := slices.Index(q, s)
	if i < 0 {
		return false
	}
	j.queued[jobUID] = slices.Delete(slices.Clone(q), i, i+1)
	return true
}

// join reports true if no start of the job is in flight: the caller runs its own now (and calls
// handOff after). Else s waits for the next transaction.
func (j *jobStarts) join(jobUID string, s *startedRun) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	q, busy := j.queued[jobUID]
	if !busy {
		if j.queued == nil {
			j.queued = map[string][]*startedRun{}
		}
		j.queued[jobUID] = nil
		return true
	}
	j.queued[jobUID] = append(q, s)
	return false
}

// handOff takes the next batch of the job's queued starts, up to startBatch, for the first of them
// to run; nil when none waits (the job has none in flight any more).
func (j *jobStarts) handOff(jobUID string) []*startedRun {
	j.mu.Lock()
	defer j.mu.Unlock()
	q := j.queued[jobUID]
	if len(q) == 0 {
		delete(j.queued, jobUID)
		return nil
	}
	next := q[:min(len(q), startBatch)]
	j.queued[jobUID] = slices.Clone(q[len(next):])
	return next
}

// startWithJob starts s with the job's other starts (jobStarts): now, with siblings' if none of
// the job's is in flight, else in the next transaction. s.ok says whether it was read. A capture
// stopped while its start waits in the queue (preempted, its job sealed) leaves it at once; one
// that a transaction took, or that was handed the next batch to run, still sees it through: the
// others' starts wait for it.
func (r *PodReconciler) startWithJob(ctx context.Context, jobUID string, s *startedRun, siblings func() []*startedRun) {
	if r.starts.join(jobUID, s) {
		r.startTogether(ctx, jobUID, append([]*startedRun{s}, siblings()...), s)
		return
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		if r.starts.leave(jobUID, s) {
			return // not read: s.ok is false
		}
		<-s.done
	}
	if s.next != nil {
		r.startTogether(ctx, jobUID, s.next, s)
	}
}

// startTogether starts the batch's runs in one transaction (db.StartRuns), tells each but self
// its start, and hands the job's queued starts to the next of them.
func (r *PodReconciler) startTogether(ctx context.Context, jobUID string, batch []*startedRun, self *startedRun) {
	runs := make([]db.RunToStart, len(batch))
	for i, b := range batch {
		runs[i] = b.run
	}
	// The batch is the job's, not self's alone: self's capture stopped (preempted, sealed) must
	// not fail the others' starts. The database's timeout still bounds it.
	starts, err := r.Records.StartRuns(context.WithoutCancel(ctx), runs, db.AgentHealthyWithin)
	if err != nil {
		archiveFailuresTotal.WithLabelValues("database").Inc()
		logr.FromContextOrDiscard(ctx).Error(err, "Starting the captures of a job's runs together failed; each will start its own", "runs", len(batch))
	}
	countClaims(starts)
	for i, b := range batch {
		// A sibling's start waits with its capture until that runs, for as long as it waits for a
		// slot: only one that holds nothing of the tenant's size (no segments, no gaps: a run with
		// nothing stored yet) is kept for it; any other sibling reads its own when it runs.
		if err == nil && (!b.sibling || len(starts[i].Segments) == 0 && len(starts[i].Gaps) == 0) {
			b.start, b.ok = starts[i], true
		}
		if b != self {
			close(b.done) // a start not kept: each reads its own
		}
	}
	if next := r.starts.handOff(jobUID); next != nil {
		next[0].next = next
		close(next[0].done)
	}
}

// startBatch bounds the runs one start transaction claims and reads (startTogether).
const startBatch = 32

// siblingPods bounds the job's pods one start looks at for siblings (startSiblings).
const siblingPods = 4 * startBatch

// startSiblings starts the captures of the other runs of the job's ended pods that no capture
// holds and that are not known recorded, up to startBatch-1 of them among siblingPods of the job's
// pods, each waiting for the start the caller reads for it in its own transaction
// (startTogether): a job's pods often end together, and a capture started by its pod's reconcile
// a moment later would read its own.
//
// The start of each is read after its capture is registered (Captures.Ensure), so no other
// capture of that run can write its segments, gaps or row between the read and the capture that
// takes it: the read is as fresh as the capture's own would be. Only pods this reconciler
// recorded under the job as they are now (recordedState) are taken: their reconcile, or the
// start-up's, checked that the job is theirs (notJobOf). Ended pods only: their runs' names do not
// change any more. A run whose capture started meanwhile (Ensure found one) reads its own start;
// the one read here for it is not used.
func (r *PodReconciler) startSiblings(ctx context.Context, job archive.JobRef, self capture.Ref) (pre []*startedRun) {
	var pods corev1.PodList
	// At most siblingPods are copied out of the cache and looked at, in a job of 100,000 pods as in
	// one of 10 (the cache still walks its index of the job's pods).
	if ctx.Err() != nil || r.Client.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingFields{podOwnerIndex: job.UID},
		client.UnsafeDisableDeepCopy, client.Limit(siblingPods)) != nil {
		return nil // each starts its own
	}
	for i := range pods.Items {
		p := &pods.Items[i] // the cache's: read only
		key := client.ObjectKeyFromObject(p)
		if owner, ok := ownerJob(p); !ok || owner != job || !podEnded(p) || releaseReason(p) != "" ||
			!controllerutil.ContainsFinalizer(p, tracking.PodFinalizer) || !r.recorded.same(key, podFingerprint(podRow(p, job))) {
			continue
		}
		done, _ := r.logged.known(key, p.UID)
		for _, cr := range podRuns(p) {
			ref := capture.Ref{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Container: cr.container, Run: cr.run}
			if _, recorded := done[logName(cr.container, cr.instance)]; cr.never || recorded || ref == self || r.Captures.Active(captureKey(ref)) {
				continue
			}
			s, ctype := &startedRun{sibling: true, done: make(chan struct{}), run: db.RunToStart{Instance: cr.instance, RunClaim: db.RunClaim{
				RunKey:    db.RunKey{PodUID: ref.PodUID, Container: ref.Container, Run: ref.Run},
				Namespace: ref.Namespace, Pod: ref.Pod, JobName: job.Name, JobUID: job.UID, Node: p.Spec.NodeName}}}, cr.ctype
			if ctx.Err() != nil || !r.Captures.Ensure(captureKey(ref), key, true, func(ctx context.Context) { r.captureRun(ctx, job, ref, ctype, s) }) {
				return pre // stopped (a seal stops its job's captures first): registers nothing more
			}
			if pre = append(pre, s); len(pre) == startBatch-1 {
				return pre
			}
		}
	}
	return pre
}

// agentCaptures, while the run's owner (start.Owner, see startRun) is the node's agent, waits for
// the agent to store it, tells it when the run is over (runEnd), and records the run once the
// agent completed it. It reports whether the run is done with (recorded, or ctx ended); false when
// the API capture is to capture it: the run was the API's from the start, or is now, taken over
// from an agent that went silent, gave it up, or did not complete it within the log deadline.
// The API capture then resumes after the agent's last segment, as after any break.
func (r *PodReconciler) agentCaptures(ctx context.Context, log logr.Logger, job archive.JobRef, ref capture.Ref, ctype record.ContainerType, start db.RunStart) bool {
	if start.Owner != record.CapturedByAgent {
		return false
	}
	key := db.RunKey{PodUID: ref.PodUID, Container: ref.Container, Run: ref.Run}
	log.V(1).Info("The node's agent captures the run")
	retry := r.Capture.Poll
	for {
		next, err := r.awaitAgent(ctx, log, job, ref, ctype, key)
		switch {
		case err != nil:
			archiveFailuresTotal.WithLabelValues("database").Inc()
			log.Error(err, "Following the agent's capture failed, will retry")
			if !r.pause(ctx, &retry) {
				return true
			}
			continue
		case next != agentCapturing:
			return next == agentRecorded
		}
		retry = r.Capture.Poll
		select {
		case <-ctx.Done():
			return true
		case <-time.After(r.Capture.Poll):
		}
	}
}

// agentState is where a run of an agent stands, as awaitAgent found it.
type agentState int

const (
	// agentCapturing: the agent captures it still.
	agentCapturing agentState = iota
	// agentRecorded: the agent completed it, and its log is recorded.
	agentRecorded
	// apiCaptures: the API capture owns it now.
	apiCaptures
)

// awaitAgent looks once at an agent's run: it records it if the agent completed it, takes it over
// if the agent is silent, gave it up, or is past the log deadline, or marks it over when runEnd
// says so.
func (r *PodReconciler) awaitAgent(ctx context.Context, log logr.Logger, job archive.JobRef, ref capture.Ref, ctype record.ContainerType,
	key db.RunKey) (agentState, error) {
	run, err := r.Records.Run(ctx, key, db.AgentHealthyWithin)
	if err != nil {
		return agentCapturing, err
	}
	end, due, err := r.runEnd(ctx, ref)
	if err != nil {
		return agentCapturing, err
	}
	var why, reason string
	switch {
	case run.Complete:
		if err := r.recordRun(ctx, job, ref, ctype, "", "", nil, nil); err != nil {
			return agentCapturing, fmt.Errorf("record the agent's capture: %w", err)
		}
		return agentRecorded, nil
	case run.Owner != record.CapturedByAgent:
		why, reason = run.HandOverReason, "released"
	case !run.AgentHealthy:
		why, reason = fmt.Sprintf("the agent of node %s sent no heartbeat for %s", run.Node, db.AgentHealthyWithin), "silent"
	case end.Over && r.Clock.Since(due) >= r.LogDeadline:
		why, reason = fmt.Sprintf("the agent of node %s did not complete the run within the log deadline (%s)", run.Node, r.LogDeadline), "deadline"
	case end.Over && !run.Over:
		return agentCapturing, r.Records.EndRun(ctx, key)
	default:
		return agentCapturing, nil
	}
	if run.Owner == record.CapturedByAgent {
		// Waits for the agent's write in flight; none succeeds after it.
		if taken, err := r.Records.TakeOverRun(ctx, key, why); err != nil || !taken {
			return agentCapturing, err // completed meanwhile: recorded at the next look
		}
	}
	runsTakenOverTotal.WithLabelValues(reason).Inc()
	log.Info("The API capture takes the run over from the node's agent", "node", run.Node, "why", why)
	return apiCaptures, nil
}

// pause waits *retry (doubled for the next time, up to retryAfter), or until ctx ends: it
// reports whether to go on.
func (r *PodReconciler) pause(ctx context.Context, retry *time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(*retry):
	}
	*retry = min(2**retry, r.retryAfter())
	return true
}

// logSources are which capture stored which bytes of a run's log, recorded with its log row
// (db.RecordRunLog). whole is the log written whole (by the API capture), else segs are its
// segments.
func logSources(ref capture.Ref, instance string, segs []record.Segment, whole *capture.Assembled) []record.SourceRange {
	if whole != nil && whole.Bytes > 0 {
		return []record.SourceRange{{PodUID: ref.PodUID, Container: ref.Container, Run: ref.Run, Instance: instance,
			To: whole.Bytes, Source: record.CapturedByAPI}}
	}
	return record.SourceRanges(segs, instance)
}
