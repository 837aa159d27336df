package archiver

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
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
// log row, gaps and segments, in one transaction (db.StartRun), retried until it succeeds. It
// reports done when the run's log is recorded already (or ctx ended): a pod's reconcile that did
// not know the run recorded (loggedRuns), or asked for its capture after one that recorded it had
// ended, starts it again, and captured again its final object would be written again, a second
// version that Object Lock keeps on a versioned bucket (and, once its segments are forgotten, an
// empty log written over an assembled one, or an unavailable row over a stored one).
func (r *PodReconciler) startRun(ctx context.Context, log logr.Logger, job archive.JobRef, ref capture.Ref) (db.RunStart, bool) {
	claim := db.RunClaim{RunKey: db.RunKey{PodUID: ref.PodUID, Container: ref.Container, Run: ref.Run},
		Namespace: ref.Namespace, Pod: ref.Pod, JobName: job.Name, JobUID: job.UID}
	pod, _ := r.runPod(ctx, ref)
	if pod != nil {
		claim.Node = pod.Spec.NodeName
	}
	for retry := time.Second; ; {
		// The name the run's log is recorded under now (runInstance, as recordRun names it).
		end, _, err := r.runEnd(ctx, ref)
		var start db.RunStart
		if err == nil {
			start, err = r.Records.StartRun(ctx, claim, db.AgentHealthyWithin, runInstance(ref, end.Previous || end.Lost == record.GapRestarted))
		}
		if err == nil {
			if start.First {
				runsClaimedTotal.WithLabelValues(start.Owner).Inc() // once per run, not per capture restart
			}
			if start.Recorded != nil {
				if pod != nil {
					r.logged.add(client.ObjectKeyFromObject(pod), pod.UID, *start.Recorded, false)
				}
				return start, true
			}
			return start, false
		}
		archiveFailuresTotal.WithLabelValues("database").Inc()
		log.Error(err, "Starting the run's capture failed, will retry")
		if !r.pause(ctx, &retry) {
			return db.RunStart{}, true
		}
	}
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
