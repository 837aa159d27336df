package archiver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
)

// containerRun is one run of a container whose log the archiver keeps: run is the container's
// restart count while it ran.
type containerRun struct {
	container string
	ctype     record.ContainerType
	run       int32
	// instance is the name the run's log is recorded under if it ends now: previous-<run+1> once
	// the container restarted, current for its last run.
	instance string
	// never: the container never started; its log is recorded as unavailable once the pod ends.
	never bool
	// ended: the run is over (the container restarted or terminated since).
	ended bool
}

// podRuns lists every container run of the pod so far: each restart leaves a run behind, and the
// current run counts once it started.
func podRuns(pod *corev1.Pod) []containerRun {
	var out []containerRun
	add := func(specs []string, statuses []corev1.ContainerStatus, ctype record.ContainerType) {
		byName := map[string]corev1.ContainerStatus{}
		for _, s := range statuses {
			byName[s.Name] = s
		}
		for _, name := range specs {
			s, ok := byName[name]
			started := ok && (s.State.Running != nil || s.State.Terminated != nil)
			if !ok || (s.RestartCount == 0 && !started) {
				out = append(out, containerRun{container: name, ctype: ctype, instance: record.InstanceCurrent, never: true})
				continue
			}
			for run := int32(0); run <= s.RestartCount; run++ {
				if run == s.RestartCount && !started {
					break // restarted, and its next run has not started yet
				}
				cr := containerRun{container: name, ctype: ctype, run: run, instance: record.InstanceCurrent, ended: s.State.Terminated != nil}
				if run < s.RestartCount {
					cr.instance, cr.ended = record.PreviousInstance(run+1), true
				}
				out = append(out, cr)
			}
		}
	}
	add(containerNames(pod.Spec.InitContainers), pod.Status.InitContainerStatuses, record.ContainerInit)
	add(containerNames(pod.Spec.Containers), pod.Status.ContainerStatuses, record.ContainerRegular)
	var eph []string
	for _, c := range pod.Spec.EphemeralContainers {
		eph = append(eph, c.Name)
	}
	add(eph, pod.Status.EphemeralContainerStatuses, record.ContainerEphemeral)
	return out
}

func containerNames(cs []corev1.Container) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return names
}

// statuses are the statuses of all the pod's containers: init, regular and ephemeral.
func statuses(pod *corev1.Pod) []corev1.ContainerStatus {
	return slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses)
}

func lastFinish(pod *corev1.Pod) *time.Time {
	var last *time.Time
	for _, s := range statuses(pod) {
		if t := s.State.Terminated; t != nil && (last == nil || t.FinishedAt.After(*last)) {
			ft := t.FinishedAt.Time
			last = &ft
		}
	}
	return last
}

// allTerminated reports whether every container's status says it terminated. A Waiting one does
// not count as stopped: it may run already (a pod deleted before its Running status was posted
// writes through its grace period), and the termination margin bounds the wait for it.
func allTerminated(pod *corev1.Pod) bool {
	for _, s := range statuses(pod) {
		if s.State.Terminated == nil {
			return false
		}
	}
	return true
}

// neverReason is the reason recorded for the log of a container whose status never showed it
// started, in a finished pod: it wrote nothing if its pod ended or all its containers terminated;
// if the pod was finished by its termination margin or a lost node, its status may only lag.
func neverReason(pod *corev1.Pod) string {
	if podEnded(pod) || allTerminated(pod) || pod.DeletionTimestamp == nil {
		return neverStarted
	}
	return "status never showed the container started (the pod was finished by its termination margin or a lost node): it may have run"
}

// finished reports whether the pod's logs are complete: it ended; or it is being deleted and its
// containers have stopped, or should have stopped TerminationMargin ago (deletionTimestamp is the
// end of the grace period), or its node is lost (they never will be seen to stop); or an operator
// released it.
func (r *PodReconciler) finished(ctx context.Context, pod *corev1.Pod) bool {
	switch {
	case podEnded(pod), releaseReason(pod) != "":
		return true
	case pod.DeletionTimestamp == nil:
		return false
	}
	// The node is asked last: only about a pod being deleted whose containers still show running.
	return allTerminated(pod) || r.Clock.Since(pod.DeletionTimestamp.Time) > r.TerminationMargin || r.nodeLost(ctx, pod) != ""
}

// archiveLogs makes sure every container run of the pod is captured, live while it runs, and its
// log recorded once it ended. It reports whether some log is not recorded yet, whether a
// container run of it is captured (live) rather than only waiting to start, and the pod's log
// records.
func (r *PodReconciler) archiveLogs(ctx context.Context, pod *corev1.Pod, job archive.JobRef) (pending, live bool, recorded []record.LogObject, err error) {
	runs, finished := podRuns(pod), r.finished(ctx, pod)
	if !finished && len(runs) > 0 && !slices.ContainsFunc(runs, func(cr containerRun) bool { return !cr.never }) {
		// No container started, so nothing is recorded or to be recorded yet: a pending pod costs
		// no database read (100,000 of them were 100,000 reads at every start).
		return true, false, nil, nil
	}
	// The rows are not read here: a run not known recorded gets its capture, whose start reads
	// its row (db.StartRuns) and stops if it has one (loggedRuns).
	key := client.ObjectKeyFromObject(pod)
	done, _ := r.logged.known(key, pod.UID)
	for _, cr := range runs {
		if row, ok := done[logName(cr.container, cr.instance)]; ok {
			recorded = append(recorded, row)
			continue
		}
		if cr.never {
			if !finished {
				pending = true
				continue
			}
			row := record.LogObject{PodUID: string(pod.UID), Container: cr.container, ContainerType: cr.ctype, Instance: cr.instance,
				State: record.LogUnavailable, Reason: neverReason(pod)}
			if err := r.Records.PutLogObject(ctx, row); err != nil {
				return false, false, nil, fmt.Errorf("record log %s of pod %s: %w", row, klog.KObj(pod), err)
			}
			r.logged.add(key, pod.UID, row, false)
			recorded = append(recorded, row)
			continue
		}
		pending, live = true, true
		ref := capture.Ref{Namespace: pod.Namespace, Pod: pod.Name, PodUID: string(pod.UID), Container: cr.container, Run: cr.run}
		// A run that ended, or whose pod is done, is captured first: the node deletes its log first (a
		// minute after the pod stops, or at the container's next restart).
		if !r.Captures.Ensure(captureKey(ref), client.ObjectKeyFromObject(pod), cr.ended || finished, func(ctx context.Context) { r.captureRun(ctx, job, ref, cr.ctype, nil) }) {
			return true, true, recorded, nil // not leading yet: the requeue comes back
		}
	}
	return pending, live, recorded, nil
}

// captureKey names a run's capture in the capture manager: it ends with the pod's UID
// (capturedPod).
func captureKey(ref capture.Ref) string { return ref.String() + "/" + ref.PodUID }

// capturedPod is the UID of the pod whose run a capture key names (captureKey).
func capturedPod(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

// captureRun captures one container run until its log is recorded: stored, with any gap recorded
// beside it, or unavailable when nothing of it could be read. Failures of the store or the
// database are retried without limit; a log that cannot be read, until the deadline. pre, when set,
// is its start read by another capture (startSiblings).
func (r *PodReconciler) captureRun(ctx context.Context, job archive.JobRef, ref capture.Ref, ctype record.ContainerType, pre *startedRun) {
	log := ctrl.Log.WithName("capture").WithValues("Pod", klog.KRef(ref.Namespace, ref.Pod), "container", ref.Container, "run", ref.Run)
	ctx = ctrl.LoggerInto(ctx, log) // for Capture's own messages (streams reopened)
	if _, err := r.Layout.Segment(job, ref.Pod, ref.PodUID, ref.Container, ref.Run, 0); err != nil {
		// PodReconciler.Reconcile lets such a pod go (podKeys) before any capture starts.
		log.Error(err, "Not capturing a run that has no valid key")
		return
	}
	// The components are valid (above), so neither key can be refused.
	segKey := func(seq int32) string {
		key, _ := r.Layout.Segment(job, ref.Pod, ref.PodUID, ref.Container, ref.Run, seq)
		return key
	}
	final := func(previous bool) (string, time.Time) {
		key, _ := r.Layout.PodLog(job, ref.Pod, ref.PodUID, ref.Container, runInstance(ref, previous))
		return key, r.retainUntilIn(ctx, r.Client, job.Namespace, r.Clock.Now())
	}
	start, done := r.startRun(ctx, log, job, ref, pre)
	if done {
		return
	}
	if r.agentCaptures(ctx, log, job, ref, ctype, start) {
		return
	}
	// The run's segments and gaps as StartRun read them, unless its node's agent had it: the
	// agent's writes since are not known here.
	var recs *runRecords
	if start.Owner != record.CapturedByAgent {
		recs = &runRecords{Records: r.Records, segments: start.Segments, gaps: start.Gaps}
	}
	retry := time.Second
	// whole, once written and until recorded, is recorded again rather than written again: a
	// second PUT leaves a second version, locked, on a versioned bucket.
	var whole *capture.Assembled
	for {
		var err error
		if whole == nil {
			var cr capture.Records = r.Records
			if recs != nil {
				cr = recs
			}
			whole, err = capture.Capture(ctx, r.Capture, r.Logs, cr, r.Store, segKey, ref, func(ctx context.Context) (capture.End, error) {
				end, _, err := r.runEnd(ctx, ref)
				return end, err
			}, final)
		}
		if ctx.Err() != nil {
			return
		}
		var (
			lost     *capture.LostError
			unread   *capture.ReadError
			conflict *capture.ConflictError
			gap      record.GapReason
			detail   string
		)
		switch {
		case err == nil:
		case errors.As(err, &lost):
			gap = lost.Reason
		case errors.As(err, &conflict):
			gap, detail = record.GapNameTaken, conflict.Error()
		case errors.As(err, &unread):
			_, due, rerr := r.runEnd(ctx, ref)
			released, nodeLost := r.released(ctx, ref), ""
			if pod, err := r.runPod(ctx, ref); err == nil && pod != nil {
				nodeLost = r.nodeLost(ctx, pod)
			}
			switch {
			case rerr != nil:
			case released != "":
				gap, detail = record.GapReleased, fmt.Sprintf("%s (log unreadable: %v)", released, unread.Err)
			case nodeLost != "":
				gap, detail = record.GapNodeLost, fmt.Sprintf("%s (log unreadable: %v)", nodeLost, unread.Err)
			case strings.Contains(unread.Err.Error(), "no such file or directory"),
				strings.Contains(unread.Err.Error(), "unable to retrieve container logs for"):
				// The kubelet's reader found no file, or the kubelet no container (it answers 200
				// with that text as the body): its container GC removed the logs.
				gap, detail = record.GapCollected, unread.Err.Error()
			case r.Clock.Since(due) >= r.LogDeadline:
				gap, detail = record.GapUnreadable, fmt.Sprintf("deadline of %s passed: %v", r.LogDeadline, unread.Err)
			}
			if gap == "" {
				archiveFailuresTotal.WithLabelValues("log-unreadable").Inc()
				log.Info("Log not readable yet, will retry", "error", err.Error())
			}
		case errors.Is(err, db.ErrFinalized):
			log.Info("Capture stopped: its job is sealed")
			return
		default:
			archiveFailuresTotal.WithLabelValues("store").Inc()
			log.Error(err, "Capture failed, will retry")
		}
		if err == nil || gap != "" {
			if err = r.recordRun(ctx, job, ref, ctype, gap, detail, whole, recs); err == nil || errors.Is(err, db.ErrFinalized) {
				return // recorded, or its job sealed meanwhile: nothing may be added to it
			}
			if errors.Is(err, errRenamed) {
				r.unwrite(ctx, log, ref, whole)
				whole = nil // read again under its new name
			}
			archiveFailuresTotal.WithLabelValues("database").Inc()
			log.Error(err, "Recording the log failed, will retry")
		}
		if !r.pause(ctx, &retry) {
			return
		}
	}
}

// putRunGap records the run's gap, after its last segment if it has any, through recs when set,
// which remembers it: an attempt that fails after this write leaves the gap recorded, and the next
// one, which may find no gap of its own, still knows it.
func (r *PodReconciler) putRunGap(ctx context.Context, ref capture.Ref, gap record.GapReason, detail string, segs []record.Segment,
	recs *runRecords) (record.Gap, error) {
	g := record.Gap{PodUID: ref.PodUID, Container: ref.Container, Run: ref.Run, Reason: gap, Detail: detail}
	if n := len(segs); n > 0 {
		g.After = segs[n-1].LastTime
	}
	put := r.Records.PutGap
	if recs != nil {
		put = recs.PutGap
	}
	return g, put(ctx, g)
}

// unwrite deletes the final log this capture wrote whole (its write-once PUT stored it) under a
// name the run no longer has (errRenamed: the container restarted before the log was recorded).
// Left there unrecorded, the write-once of the run that has that name now would find it taken and
// record that run's log lost. Not when a row records it: a row committed by an attempt whose
// commit reported an error, or by another run that found the same bytes there (sameLog). An
// object this capture only found there (whole.StoredSHA256 empty) may be another's, and is left
// as it is. A locked object, or a failed delete, stays: that next run's write then records the
// conflict, with its reason.
func (r *PodReconciler) unwrite(ctx context.Context, log logr.Logger, ref capture.Ref, whole *capture.Assembled) {
	if whole == nil || whole.StoredSHA256 == "" {
		return
	}
	logs, err := r.Records.PodLogObjects(ctx, ref.PodUID)
	if err != nil {
		log.Error(err, "Reading the pod's log rows failed: the log written under the run's former name stays", "key", whole.Key)
		return
	}
	for _, l := range logs {
		if l.ObjectKey == whole.Key {
			return
		}
	}
	if err := r.Store.Delete(ctx, whole.Key); err != nil {
		log.Error(err, "Deleting the log written under the run's former name failed", "key", whole.Key)
	}
}

// runEnd tells whether the run is over, from the cached pod, and when it ended (the deadline of an
// unreadable log counts from there).
func (r *PodReconciler) runEnd(ctx context.Context, ref capture.Ref) (capture.End, time.Time, error) {
	pod, err := r.runPod(ctx, ref)
	if err != nil {
		return capture.End{}, time.Time{}, err
	}
	if pod == nil {
		// Gone despite the finalizer (removed by hand): what the node had is gone with it.
		return capture.End{Over: true, Lost: record.GapCollected}, r.Clock.Now(), nil
	}
	due := r.Clock.Now()
	if pod.DeletionTimestamp != nil {
		due = pod.DeletionTimestamp.Time
	}
	var s *corev1.ContainerStatus
	all := statuses(pod)
	if i := slices.IndexFunc(all, func(s corev1.ContainerStatus) bool { return s.Name == ref.Container }); i >= 0 {
		s = &all[i]
	}
	finished := r.finished(ctx, pod)
	if s == nil {
		return capture.End{Over: finished, Final: podEnded(pod) || !mayRestart(pod, ref.Container, 1)}, due, nil
	}
	lastRun, last := lastTerminated(*s)
	switch {
	case s.RestartCount > ref.Run+1:
		// The node keeps the last dead run only.
		end := capture.End{Over: true, Lost: record.GapRestarted}
		if last != nil && lastRun == ref.Run+1 {
			end.Limit = runLimit(time.Time{}, last.StartedAt.Time)
		}
		return end, due, nil
	case s.RestartCount == ref.Run+1 && last != nil && lastRun == ref.Run+1:
		// Backing off after the next run died too (CrashLoopBackOff): the node serves that run as
		// the container's previous one and as its current one. The run's own container cannot be
		// asked for any more.
		return capture.End{Over: true, Lost: record.GapRestarted, Limit: runLimit(time.Time{}, last.StartedAt.Time)}, due, nil
	case s.RestartCount == ref.Run+1:
		end := capture.End{Over: true, Previous: true, Limit: runLimit(time.Time{}, stateStarted(s.State))}
		if last != nil {
			due, end.StartedAt, end.FinishedAt, end.ContainerID = last.FinishedAt.Time, last.StartedAt.Time, last.FinishedAt.Time, last.ContainerID
			end.Limit = runLimit(last.FinishedAt.Time, stateStarted(s.State))
		}
		return end, due, nil
	}
	// A terminated container may still restart while its pod runs: its run is named only once the
	// pod is finished. Until then its log, complete, is read once (Terminated): the node ends a
	// follow stream of a container that is not running at once.
	// A pod finished by the archiver's decision (termination margin, lost node) while the status
	// shows the run running is read as it is, with a gap: never taken for complete.
	// A container that never restarts (restart policy Never) has no later run: every read is its.
	end := capture.End{Over: finished, StillRunning: finished && s.State.Running != nil && !podEnded(pod),
		Final: podEnded(pod) || !mayRestart(pod, ref.Container, 1)}
	t := s.State.Terminated
	if t == nil && last != nil && lastRun == ref.Run {
		t = last // backing off after this run died (CrashLoopBackOff): the status names it last
	}
	if t != nil {
		end.Terminated, end.StartedAt, end.FinishedAt, end.ContainerID = !finished, t.StartedAt.Time, t.FinishedAt.Time, t.ContainerID
		// No later run yet: the node serves this one until the next starts, and then the status
		// shows it (and the limit, above). One that cannot restart has no later run at all.
		end.Final = end.Final || !mayRestart(pod, ref.Container, t.ExitCode)
		if pod.DeletionTimestamp == nil {
			due = t.FinishedAt.Time
		}
	} else if r := s.State.Running; r != nil {
		end.StartedAt, end.ContainerID = r.StartedAt.Time, s.ContainerID
	}
	return end, due, nil
}

// lastTerminated is the run the status's last termination state names, and that state (nil if
// none). A kubelet names there the newest dead container but the current one: the run before the
// current one, or, while the container waits to be restarted (CrashLoopBackOff), the run that died
// last, whose number is then the restart count.
func lastTerminated(s corev1.ContainerStatus) (int32, *corev1.ContainerStateTerminated) {
	t := s.LastTerminationState.Terminated
	if t == nil {
		return 0, nil
	}
	if s.State.Waiting != nil {
		return s.RestartCount, t
	}
	return s.RestartCount - 1, t
}

// stateStarted is when the container in state started (zero: it has not).
func stateStarted(state corev1.ContainerState) time.Time {
	switch {
	case state.Running != nil:
		return state.Running.StartedAt.Time
	case state.Terminated != nil:
		return state.Terminated.StartedAt.Time
	}
	return time.Time{}
}

// runLimit is the earliest a run of a container after the one that finished at finished can have
// stamped a line, the next run having started at next (either zero: not known; both: zero). The
// status keeps whole seconds. The next container is started after the run finished, so its lines
// are stamped after the finish's second began; and after its start, less the moment its process
// may write before the start is recorded: a second before its start's second.
func runLimit(finished, next time.Time) time.Time {
	var limit time.Time
	if !finished.IsZero() {
		limit = finished.Truncate(time.Second)
	}
	if n := next.Truncate(time.Second).Add(-time.Second); !next.IsZero() && n.After(limit) {
		limit = n
	}
	return limit
}

// mayRestart reports whether the pod's container, terminated with exit, may run again: by the
// pod's restart policy (init containers restart on failure unless it is Never; sidecars always;
// ephemeral containers never).
func mayRestart(pod *corev1.Pod, container string, exit int32) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == container {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				return true
			}
			return pod.Spec.RestartPolicy != corev1.RestartPolicyNever && exit != 0
		}
	}
	if !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == container }) {
		return false // an ephemeral container
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exit != 0
	}
	return true
}

// released is the release reason an operator gave the run's pod, if any.
func (r *PodReconciler) released(ctx context.Context, ref capture.Ref) string {
	if pod, err := r.runPod(ctx, ref); err == nil && pod != nil {
		return releaseReason(pod)
	}
	return ""
}

// runPod is the run's pod as cached, or nil once it is gone (or another pod took its name). It
// shares its maps and slices with the cache, uncopied (a capture reads its pod at every change
// of it): read only.
func (r *PodReconciler) runPod(ctx context.Context, ref capture.Ref) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Pod}, pod, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err), err == nil && string(pod.UID) != ref.PodUID:
		return nil, nil
	case err != nil:
		return nil, err
	}
	return pod, nil
}

// runInstance is the name a run's log is recorded under: previous-<run+1> once the container
// restarted, current for its last run.
func runInstance(ref capture.Ref, previous bool) string {
	if previous {
		return record.PreviousInstance(ref.Run + 1)
	}
	return record.InstanceCurrent
}

// errRenamed: a run's log written whole as its container's current one is now its previous one
// (the container restarted since): it is read again under that name.
var errRenamed = errors.New("the run was renamed")

// recordRun assembles a captured run into its log object and records it, with its gap if any,
// then forgets the segments. A run of which nothing could be read is recorded unavailable. whole,
// when set, is the run's log already written whole (see capture.Capture): nothing to assemble.
// recs, when set, knows the run's gaps (runRecords): they are not read. The row, the log's sources
// and, when it is the pod's last log and the pod is archived complete, the pod's mark are written
// in one transaction (podArchive).
func (r *PodReconciler) recordRun(ctx context.Context, job archive.JobRef, ref capture.Ref, ctype record.ContainerType, gap record.GapReason, detail string,
	whole *capture.Assembled, recs *runRecords) error {
	end, _, err := r.runEnd(ctx, ref)
	if err != nil {
		return err
	}
	instance := runInstance(ref, end.Previous || end.Lost == record.GapRestarted)
	row := record.LogObject{PodUID: ref.PodUID, Container: ref.Container, ContainerType: ctype, Instance: instance}
	key, err := r.Layout.PodLog(job, ref.Pod, ref.PodUID, ref.Container, instance)
	if err != nil {
		return err
	}
	var (
		segs []record.Segment
		own  *record.Gap // the gap recorded here, if any
	)
	if whole == nil {
		if segs, err = r.Records.Segments(ctx, ref.PodUID, ref.Container, ref.Run); err != nil {
			return err
		}
	} else if whole.Key != key {
		previous, _ := r.Layout.PodLog(job, ref.Pod, ref.PodUID, ref.Container, runInstance(ref, true))
		if whole.Key != previous || instance != record.InstanceCurrent {
			// The container restarted since its log was read as its current one: read it again.
			return fmt.Errorf("the log of %s was written as %s, but the run is now %s: %w", ref, whole.Key, instance, errRenamed)
		}
		// Written as previous (a later run was seen), and a status now names it current: restart
		// counts should not go back, and when a status says so the earlier name stands. Read
		// again, the current log would be another run's.
		instance = runInstance(ref, true)
		row.Instance, key = instance, whole.Key
	}
	switch {
	case gap == record.GapNameTaken:
		// The run's name holds another log, left as it is: the whole run is missing from the
		// archive (the gap has no line after which), and the row, unless the other log's, says
		// so. What was read of it is in its segments, if it had any, until the job's seal sweeps
		// them.
		if _, err := r.putRunGap(ctx, ref, gap, detail, nil, recs); err != nil {
			return err
		}
		row.State, row.Reason, segs = record.LogUnavailable, string(gap)+": "+detail, nil
	case whole != nil:
		row = whole.Stored(row)
	case gap != "" && len(segs) == 0:
		row.State, row.Reason = record.LogUnavailable, string(gap)
		if detail != "" {
			row.Reason += ": " + detail
		}
	default:
		if gap != "" {
			g, err := r.putRunGap(ctx, ref, gap, detail, segs, recs)
			if err != nil {
				return err
			}
			own = &g
		}
		a, err := capture.Assemble(ctx, r.Store, ref, key, segs,
			r.retainUntilIn(ctx, r.Client, job.Namespace, r.Clock.Now()))
		if conflict := (*capture.ConflictError)(nil); errors.As(err, &conflict) {
			// Its name holds another log, left as it is: assembling again cannot help.
			return r.recordRun(ctx, job, ref, ctype, record.GapNameTaken, conflict.Error(), nil, recs)
		}
		if err != nil {
			return err
		}
		row = a.Stored(row)
	}
	// Every gap of the run, those the capture found (rotated away) as well as the one above.
	var (
		runGaps []record.Gap
		sources []record.SourceRange
	)
	if row.State == record.LogStored {
		known, ok := recs.knownGaps(own)
		if !ok {
			all, err := r.Records.Gaps(ctx, job.UID)
			if err != nil {
				return err
			}
			known = nil
			for _, g := range all {
				if g.PodUID == ref.PodUID && g.Container == ref.Container && g.Run == ref.Run {
					known = append(known, g)
				}
			}
		}
		runGaps = known
		row.Reason, _ = incompleteReason("", nil, nil, runGaps)
		sources = logSources(ref, instance, segs, whole)
	}
	pod, _ := r.runPod(ctx, ref)
	archive := r.podArchive(ctx, pod, row)
	if err := r.Records.RecordRunLog(ctx, row, sources, archive); err != nil {
		return fmt.Errorf("record the log of %s: %w", ref, err)
	}
	if pod != nil {
		r.logged.add(client.ObjectKeyFromObject(pod), pod.UID, row, archive != nil)
	}
	if row.State == record.LogStored {
		logBytesArchivedTotal.Add(float64(row.Bytes))
	} else if gap != "" {
		logGapsTotal.WithLabelValues(string(gap)).Inc()
		if pod != nil {
			r.Recorder.Eventf(pod, corev1.EventTypeWarning, "LogUnavailable", "Log of container %s (%s) recorded as unavailable: %s", ref.Container, instance, row.Reason)
		}
	}
	for _, g := range runGaps {
		logGapsTotal.WithLabelValues(string(g.Reason)).Inc()
		if pod != nil {
			r.Recorder.Eventf(pod, corev1.EventTypeWarning, "LogIncomplete", "Log of container %s (%s) is incomplete: %s", ref.Container, instance, describeGap(g))
		}
	}
	if len(segs) == 0 {
		return nil // written whole, or nothing was read: no segment to forget
	}
	return capture.Forget(ctx, r.Records, r.Store, ref, segs)
}

// podArchive is the pod's archive to record with row, the log of one of its runs, when that is
// its last log and the pod is archived complete: the pod is finished, not released by an operator,
// every other run's log is known recorded (loggedRuns) and none of them, nor row, says anything
// is missing. Otherwise nil: the pod's reconcile decides, as it always did (release).
func (r *PodReconciler) podArchive(ctx context.Context, pod *corev1.Pod, row record.LogObject) *db.PodArchive {
	if pod == nil || releaseReason(pod) != "" || !r.finished(ctx, pod) {
		return nil
	}
	known, _ := r.logged.known(client.ObjectKeyFromObject(pod), pod.UID)
	logs := []record.LogObject{row}
	for _, cr := range podRuns(pod) {
		name := logName(cr.container, cr.instance)
		if name == logName(row.Container, row.Instance) {
			continue
		}
		l, ok := known[name]
		if !ok {
			return nil
		}
		logs = append(logs, l)
	}
	if mayHaveGaps(logs) {
		return nil
	}
	if reason, _ := incompleteReason("", nil, logs, nil); reason != "" {
		return nil
	}
	return &db.PodArchive{At: r.Clock.Now()}
}

// describeGap says what a gap misses and why, for an Event.
func describeGap(g record.Gap) string {
	var span string
	if !g.After.IsZero() {
		span += " after " + g.After.UTC().Format(time.RFC3339Nano)
	}
	if !g.Before.IsZero() {
		span += " before " + g.Before.UTC().Format(time.RFC3339Nano)
	}
	s := fmt.Sprintf("output missing%s: %s", span, g.Reason)
	if g.Detail != "" {
		s += " (" + g.Detail + ")"
	}
	return s
}
