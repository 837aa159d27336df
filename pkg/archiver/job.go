package archiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

const (
	jobAPIVersion = "batch.volcano.sh/v1alpha1"
	// volcanoTaskLabel is set by Volcano on every pod to its task's name.
	volcanoTaskLabel = "volcano.sh/task-spec"
	// podOwnerIndex indexes cached pods by the UID of their controlling VcJob.
	podOwnerIndex = "jobvault.io/owner-uid"
)

// JobReconciler records every VcJob and each of its phase transitions, and once a tracked job is
// terminal or being deleted and all its pods are archived, stores the final object and manifest and
// releases the job finalizer.
type JobReconciler struct {
	Deps
	Options

	// Captures runs the captures of container logs: the seal stops those of the job's pods
	// (stopCaptures).
	Captures *capture.Manager

	// recorded skips the job's upsert when the job did not change since it was last recorded.
	recorded recordedState
	// contents skips each write (the row, the transitions) whose content did not change since it
	// was last written, whatever else changed in the job: Volcano updates a finished job's status
	// as its pods are released, without changing what is recorded.
	contents recordedState
	// refused holds, by job name, a refusal: why the database refused part of the job's record for
	// good, which makes the job released when it is finalized.
	refused sync.Map
	// released holds, by job name, the UID of each job this reconciler released and when
	// (releasedJob): a reconcile from a cache that has not seen the release yet seals nothing again.
	released sync.Map
}

// releasedJob is a job released at a time (JobReconciler.released).
type releasedJob struct {
	uid types.UID
	at  time.Time
}

// releaseEcho is how long a job's own release is waited for in the cache before a job that still
// shows our finalizer there is looked at again: its update event comes back within moments; one
// whose finalizer was added again after the release is handled after this.
const releaseEcho = 30 * time.Second

// refusal says why the database refused part of the record of the job with that UID.
type refusal struct {
	uid    types.UID
	reason string
}

// Reconcile records the job and finalizes it when due.
func (r *JobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	job := &batchv1alpha1.Job{}
	if err := r.Client.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			r.recorded.forget(req.NamespacedName)
			r.contents.forget(req.NamespacedName)
			r.refused.Delete(req.NamespacedName)
			r.released.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if wait := r.releaseSeen(req.NamespacedName, job); wait > 0 {
		// Released here a moment ago, and the cache does not show it yet: sealing and patching
		// again would fail the patch's test (a PATCH spent for nothing, issue 28 target 5). The
		// release's own update event comes back here.
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if r.excluded(job.Namespace) || !r.Shard.Owns(job.UID) {
		return ctrl.Result{}, nil // never tracked here, or another shard's
	}
	if !tracked(job) && job.DeletionTimestamp == nil {
		return ctrl.Result{}, r.track(ctx, job) // the update brings the job back here
	}
	if err := r.record(ctx, job, false); err != nil {
		return ctrl.Result{}, err
	}
	if !controllerutil.ContainsFinalizer(job, tracking.JobFinalizer) || !finalizable(job) {
		return ctrl.Result{}, nil
	}
	pending, err := r.pendingPods(ctx, job)
	if err != nil || pending > 0 {
		return ctrl.Result{}, err // pod changes requeue the job
	}
	outside := r.listOutOfView(ctx, job)
	defer outside.wait(ctx) //nolint:errcheck // finalize waits and answers for it; this waits on every other return
	// The row as the job is now, with what record deferred, before the seal reads it.
	start := time.Now()
	if err := r.record(ctx, job, true); err != nil {
		return ctrl.Result{}, err
	}
	observeStep("record", start)
	return ctrl.Result{}, r.finalize(ctx, job, outside)
}

// releaseSeen says how long to wait for the cache to show the job's release by this reconciler,
// 0 once it does (or the release is releaseEcho old, or of another job of that name).
func (r *JobReconciler) releaseSeen(key types.NamespacedName, job *batchv1alpha1.Job) time.Duration {
	v, ok := r.released.Load(key)
	if !ok {
		return 0
	}
	rel := v.(releasedJob)
	wait := releaseEcho - r.Clock.Since(rel.at)
	if rel.uid != job.UID || !controllerutil.ContainsFinalizer(job, tracking.JobFinalizer) || wait <= 0 {
		r.released.Delete(key)
		return 0
	}
	return wait
}

// tracked reports whether the webhook (or an earlier backstop) stamped the job.
func tracked(job *batchv1alpha1.Job) bool {
	return controllerutil.ContainsFinalizer(job, tracking.JobFinalizer) || job.Annotations[tracking.ArchivedAtAnnotation] != ""
}

// finalizable: terminal, being deleted, or released by an operator. Aborted is resumable in
// Volcano, so it is only finalized on deletion.
func finalizable(job *batchv1alpha1.Job) bool {
	return tracking.IsTerminal(job.Status.State.Phase) || job.DeletionTimestamp != nil || releaseReason(job) != ""
}

// track is the backstop for jobs admitted while the webhook was unavailable: it adds what the
// webhook would have (but the submitter, which only the admission request knew), in a
// metadata-only patch. The job's pods need nothing from it: they are recognised by their owner
// and Volcano's label (tracking.JobOf), and get their finalizer from the pod webhook or
// PodReconciler. (Volcano's webhook refuses any change to a job's spec, pod templates included.)
func (r *JobReconciler) track(ctx context.Context, job *batchv1alpha1.Job) error {
	if job.Annotations[tracking.ArchivedAtAnnotation] != "" {
		return nil
	}
	// With an optimistic lock: a merge patch replaces the whole finalizer list, so a stale cached
	// job would drop a finalizer someone else added meanwhile.
	patch := client.MergeFromWithOptions(job.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(job, tracking.JobFinalizer)
	metav1.SetMetaDataLabel(&job.ObjectMeta, tracking.TrackedLabel, tracking.TrackedValue)
	// Marks the job as not admitted by the webhook: its record names no submitter (see unprovedSubmitter).
	metav1.SetMetaDataAnnotation(&job.ObjectMeta, tracking.BackstoppedAtAnnotation, r.Clock.Now().UTC().Format(time.RFC3339))
	if err := r.Client.Patch(ctx, job, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile: nothing left to track
		}
		return fmt.Errorf("track job %s: %w", klog.KObj(job), err)
	}
	jobsBackstoppedTotal.Inc()
	r.Recorder.Event(job, corev1.EventTypeWarning, "Backstopped", "Job was admitted without jobvault's finalizer (webhook unavailable?); added it, submitter unknown")
	ctrl.LoggerFrom(ctx).Info("Added missing job finalizer", "Job", klog.KObj(job))
	return nil
}

// record upserts the job row and every phase transition: Volcano appends a condition per phase
// change, so transitions that happened while the archiver was down are recovered from them.
// The same object (UID and resourceVersion) is recorded once: nothing recorded can have changed.
//
// A finished job's row is not rewritten when only the two counters Volcano bumps at every rewrite
// of its status changed (settledFingerprint): as its pods are released, Volcano rewrites it about
// once every three pods, and each was a row write (issue 28). Any other change is written at once,
// every phase change among them; settle (the job is about to be sealed) writes what was deferred,
// so the sealed row is the job as it is sealed.
//
// What the database refuses for good (db.ErrInvalid: a value it cannot hold, which a tenant may
// write into its job) must not hold the job for ever: the row is written without the free-form
// content (refusedRow), the transitions without their texts, and the job is released with the
// reason when it is finalized (refusedReason).
func (r *JobReconciler) record(ctx context.Context, job *batchv1alpha1.Job, settle bool) error {
	key, version := client.ObjectKeyFromObject(job), string(job.UID)+"/"+job.ResourceVersion
	if !settle && r.recorded.same(key, version) {
		return nil
	}
	recordable := r.recordable(job)
	row, err := jobRow(recordable, r.Cluster)
	if err != nil {
		return err
	}
	ts := transitions(job, r.Clock.Now())
	// A part refused is not remembered: it is written (and refused) again at the next change.
	rowPrint, tsPrint, settledPrint := jobFingerprint(row), transitionsFingerprint(string(job.UID), ts), settledFingerprint(recordable, row)
	was := append(strings.SplitN(r.contents.get(key), "|", 3), "", "")
	wasRow, wasTs, wasSettled := was[0], was[1], was[2]
	writeRow, writeTs := rowPrint != wasRow, tsPrint != wasTs
	if writeRow && !settle && tracking.IsTerminal(job.Status.State.Phase) && settledPrint != "" && settledPrint == wasSettled {
		writeRow, rowPrint = false, wasRow // deferred: the row written stays what is remembered
	}
	if writeRow && writeTs {
		// Both in one transaction; a part refused is written apart below, to know which.
		n, err := r.Records.RecordJob(ctx, &row, string(job.UID), ts)
		if err != nil && !errors.Is(err, db.ErrInvalid) {
			return fmt.Errorf("record job %s: %w", klog.KObj(job), err)
		}
		if err == nil {
			transitionsRecordedTotal.Add(float64(n))
			writeRow, writeTs = false, false
		}
	}
	var refused []string
	if writeRow {
		err = r.Records.UpsertJob(ctx, row)
		if errors.Is(err, db.ErrInvalid) {
			refused = append(refused, fmt.Sprintf("the database refused the job's record (%v): recorded without its labels, annotations, spec, status, queue and submitter", err))
			err, rowPrint, settledPrint = r.Records.UpsertJob(ctx, refusedRow(row)), "", ""
		}
		if err != nil {
			return fmt.Errorf("record job %s: %w", klog.KObj(job), err)
		}
	}
	if writeTs {
		n, err := r.Records.RecordTransitions(ctx, string(job.UID), ts)
		if errors.Is(err, db.ErrInvalid) {
			refused = append(refused, fmt.Sprintf("the database refused the job's phase transitions (%v): recorded without their reasons and messages", err))
			for i := range ts {
				ts[i].Reason, ts[i].Message = "", ""
			}
			n, err = r.Records.RecordTransitions(ctx, string(job.UID), ts)
			tsPrint = ""
		}
		if err != nil {
			return fmt.Errorf("record transitions of job %s: %w", klog.KObj(job), err)
		}
		transitionsRecordedTotal.Add(float64(n))
	}
	r.contents.set(key, rowPrint+"|"+tsPrint+"|"+settledPrint)
	if len(refused) > 0 {
		r.refused.Store(key, refusal{uid: job.UID, reason: strings.Join(refused, "; ")})
		r.Recorder.Event(job, corev1.EventTypeWarning, "RecordRefused", refused[0])
		ctrl.LoggerFrom(ctx).Info("The database refused part of the job's record; it will be released", "Job", klog.KObj(job), "reason", strings.Join(refused, "; "))
	} else {
		r.refused.Delete(key)
	}
	r.recorded.set(key, version)
	return nil
}

// jobFingerprint is a hash of everything UpsertJob writes of the row.
func jobFingerprint(row record.Job) string {
	raw, err := json.Marshal(row)
	if err != nil {
		return "" // never the same as a fingerprint: written
	}
	h := fnv.New128a()
	h.Write(raw)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// settledFingerprint is jobFingerprint of the job's row without the two counters Volcano bumps at
// every rewrite of a job's status (killJob, at each event of a finished job's pods):
// status.version and status.runningDuration; "" if it cannot be computed.
func settledFingerprint(job *batchv1alpha1.Job, row record.Job) string {
	status := job.Status
	status.Version, status.RunningDuration = 0, nil
	raw, err := json.Marshal(status)
	if err != nil {
		return ""
	}
	row.Status = raw
	return jobFingerprint(row)
}

// transitionsFingerprint is a hash of the job's UID and its transitions' keys: RecordTransitions
// inserts each (phase, time) once and leaves one recorded as it is. The UID keeps a job recreated
// under the same name, with the same phases at the same times, from passing for the old one.
func transitionsFingerprint(uid string, ts []record.Transition) string {
	h := fnv.New128a()
	fmt.Fprintf(h, "%s|", uid)
	for _, t := range ts {
		fmt.Fprintf(h, "%s|%s|", t.Phase, t.Time.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// refusedRow is what is recorded of a job whose row the database refused: what the API server
// validated (identity, times, phase, counts), without the content a tenant writes freely.
func refusedRow(row record.Job) record.Job {
	return record.Job{UID: row.UID, Cluster: row.Cluster, Namespace: row.Namespace, Name: row.Name, CreatedAt: row.CreatedAt,
		FinishedAt: row.FinishedAt, Phase: row.Phase, RetryCount: row.RetryCount}
}

// refusedReason is why the database refused part of the job's record, "" if it did not.
func (r *JobReconciler) refusedReason(job *batchv1alpha1.Job) string {
	if v, ok := r.refused.Load(client.ObjectKeyFromObject(job)); ok && v.(refusal).uid == job.UID {
		return v.(refusal).reason
	}
	return ""
}

func jobRow(job *batchv1alpha1.Job, cluster string) (record.Job, error) {
	spec, err := json.Marshal(job.Spec)
	if err != nil {
		return record.Job{}, err
	}
	status, err := json.Marshal(job.Status)
	if err != nil {
		return record.Job{}, err
	}
	row := record.Job{UID: string(job.UID), Cluster: cluster, Namespace: job.Namespace, Name: job.Name, Queue: job.Spec.Queue,
		Submitter: job.Annotations[tracking.SubmitterAnnotation], CreatedAt: job.CreationTimestamp.Time,
		Phase: string(job.Status.State.Phase), RetryCount: job.Status.RetryCount, Labels: job.Labels,
		Annotations: job.Annotations, Spec: spec, Status: status}
	if g := job.Annotations[tracking.SubmitterGroupsAnnotation]; g != "" {
		_ = json.Unmarshal([]byte(g), &row.SubmitterGroups) // a hand-edited value is kept in Annotations
	}
	if t, err := time.Parse(time.RFC3339, job.Annotations[tracking.AdmittedAtAnnotation]); err == nil {
		row.AdmittedAt = &t
	}
	if tracking.IsTerminal(job.Status.State.Phase) && !job.Status.State.LastTransitionTime.IsZero() {
		t := job.Status.State.LastTransitionTime.Time
		row.FinishedAt = &t
	}
	return row, nil
}

func transitions(job *batchv1alpha1.Job, now time.Time) []record.Transition {
	var ts []record.Transition
	for _, c := range job.Status.Conditions {
		if c.LastTransitionTime == nil || c.Status == "" {
			continue
		}
		ts = append(ts, record.Transition{Phase: string(c.Status), Time: c.LastTransitionTime.Time, ObservedAt: now, Source: record.SourceCondition})
	}
	s := job.Status.State
	if s.Phase != "" && !s.LastTransitionTime.IsZero() {
		ts = append(ts, record.Transition{Phase: string(s.Phase), Time: s.LastTransitionTime.Time, Reason: s.Reason, Message: s.Message,
			ResourceVersion: job.ResourceVersion, ObservedAt: now, Source: record.SourceObserved})
	}
	return ts
}

// pendingPods lists the job's pods that still hold the pod finalizer. When the job is being
// deleted it also deletes those still running, as the garbage collector would once the job is
// gone: their logs are archived as they end, and only then can the job go.
func (r *JobReconciler) pendingPods(ctx context.Context, job *batchv1alpha1.Job) (int, error) {
	// The cache's own objects, not copies: a job of thousands of pods is looked at on every
	// release of one of them. Only the few patched or deleted are copied (the client writes the
	// answer into the object).
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingFields{podOwnerIndex: string(job.UID)},
		client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("list pods of job %s: %w", klog.KObj(job), err)
	}
	pending := 0
	reason := releaseReason(job)
	for i := range pods.Items {
		if !controllerutil.ContainsFinalizer(&pods.Items[i], tracking.PodFinalizer) {
			continue
		}
		pending++
		p := &pods.Items[i] // shared with the cache: read only
		switch {
		case reason != "" && releaseReason(p) == "":
			// An operator released the job: release its pods the same way.
			p = p.DeepCopy()
			patch := client.MergeFrom(p.DeepCopy())
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, tracking.ReleaseAnnotation, job.Annotations[tracking.ReleaseAnnotation])
			if err := r.Client.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
				return 0, fmt.Errorf("release pod %s of released job: %w", klog.KObj(p), err)
			}
		case job.DeletionTimestamp != nil && p.DeletionTimestamp == nil && !podEnded(p) && !orphaning(job):
			if err := r.Client.Delete(ctx, p.DeepCopy(), client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return 0, fmt.Errorf("delete pod %s of deleted job: %w", klog.KObj(p), err)
			}
		}
	}
	return pending, nil
}

// outsideList is the list of a job's pods outside the archiver's cache (podsOutOfView), run beside
// the job's record and seal: the cache holds only pods labelled volcano.sh/job-name, and a pod
// whose label was removed is still the job's, to be in its record before the job is sealed. It
// starts once no cached pod of the job holds the pod finalizer, as it did when it ran before the
// seal (design record 0014). The list is a consistent read, which waits for the API server's
// cache to catch up with etcd: 224 ms on average in BenchmarkReleaseThroughput on 2026-11-29, on
// the path of every job's release.
type outsideList struct {
	done chan struct{}
	err  error
}

// listOutOfView starts the list; the caller waits for it (wait) before it returns, so that no list
// outlives its reconcile. The list has the job's identity of its own: the reconcile goes on with
// the job (the release's patch writes the server's answer into it).
func (r *JobReconciler) listOutOfView(ctx context.Context, job *batchv1alpha1.Job) *outsideList {
	l := &outsideList{done: make(chan struct{})}
	own := &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name, UID: job.UID}}
	go func() {
		defer close(l.done)
		start := time.Now()
		if _, l.err = r.podsOutOfView(ctx, own); l.err == nil {
			observeStep("out-of-view", start)
		}
	}()
	return l
}

// wait waits for the list to end, and is its error. As the seal's check before the chain
// (audit.Sealer.Settled), it holds the seal until whatever the list found is recorded: the
// finalizing transaction then sees those rows, compares them with what the seal read, and fails
// if they differ (pkg/audit's errRowsChanged), and the next pass seals them.
func (l *outsideList) wait(context.Context) error {
	<-l.done
	return l.err
}

// observeStep records how long a step of a job's finalization took since start (the real time:
// what it cost, not a test's clock), for jobvault_archiver_finalize_step_seconds.
func observeStep(step string, start time.Time) {
	finalizeStepSeconds.WithLabelValues(step).Observe(time.Since(start).Seconds())
}

// finalizableSince is when the job became finalizable: its terminal phase's start, or its
// deletion, whichever came first (zero if neither).
func finalizableSince(job *batchv1alpha1.Job) time.Time {
	var since time.Time
	if tracking.IsTerminal(job.Status.State.Phase) {
		since = job.Status.State.LastTransitionTime.Time
	}
	if d := job.DeletionTimestamp; d != nil && (since.IsZero() || d.Time.Before(since)) {
		since = d.Time
	}
	return since
}

// orphaning reports whether the job is being deleted with its pods kept (`kubectl delete
// --cascade=orphan`): the garbage collector then strips their owner references instead of deleting
// them, and so must the archiver not delete them. Their logs are archived as they end (see
// PodReconciler.orphaned); the job does not wait for them.
func orphaning(job *batchv1alpha1.Job) bool {
	return controllerutil.ContainsFinalizer(job, metav1.FinalizerOrphanDependents)
}

// stopCaptures stops the captures of the job's pods, and waits for them, before the seal: a pod
// an operator released has its final rows while its containers may still be captured, and such a
// capture would store segments beside the sealed archive and rows into its sealed record (the
// database refuses those now, see db.ErrFinalized).
// The pods are read with the seal's reads (sealRecords): a capture stopped here may have written
// rows after them, and then they are read again.
func (r *JobReconciler) stopCaptures(ctx context.Context, ref archive.JobRef, recs *sealRecords) error {
	if r.Captures == nil {
		return nil
	}
	pods, err := recs.Pods(ctx, ref.UID)
	if err != nil {
		return fmt.Errorf("list the recorded pods: %w", err)
	}
	uids := make(map[string]bool, len(pods))
	for _, p := range pods {
		uids[p.UID] = true
	}
	stopped := false
	err = r.Captures.Stop(ctx, func(key string) bool {
		mine := uids[capturedPod(key)]
		stopped = stopped || mine
		return mine
	})
	if stopped {
		recs.read = nil
	}
	return err
}

// finalize stores job.json and manifest.json, marks the row archived and appends the job to the
// audit chain (audit.Sealer), then in one patch (releaseJob) annotates the job and removes its
// finalizer. Every step is idempotent, so a crash between them is repaired by the next pass.
func (r *JobReconciler) finalize(ctx context.Context, job *batchv1alpha1.Job, outside *outsideList) error {
	ref := archive.JobRef{Namespace: job.Namespace, Name: job.Name, UID: string(job.UID)}
	now := r.Clock.Now().UTC()
	reason := releaseReason(job)

	obj := r.recordable(job)
	obj.APIVersion, obj.Kind = jobAPIVersion, "Job"
	// A stored log that cannot be read back is retried until the deadline (or an operator's
	// release), counted from when the job became finalizable, as an unreadable container log is.
	since := finalizableSince(job)
	giveUp := reason != "" || (!since.IsZero() && r.Clock.Since(since) >= r.LogDeadline)
	recs := &sealRecords{Records: r.Records, uid: ref.UID}
	start := time.Now()
	if err := r.stopCaptures(ctx, ref, recs); err != nil {
		return fmt.Errorf("finalize job %s: %w", klog.KObj(job), err)
	}
	observeStep("captures", start)
	start = time.Now()
	sealed, err := audit.Sealer{Records: recs, Store: r.Store, Layout: r.Layout, Cluster: r.Cluster, Refused: r.refusedReason(job), GiveUp: giveUp,
		RetainUntil: func(at time.Time) time.Time { return r.retainUntilIn(ctx, r.Client, ref.Namespace, at) }, Settled: outside.wait}.Seal(ctx, ref, obj, reason, now)
	if err != nil {
		return fmt.Errorf("finalize job %s: %w", klog.KObj(job), err)
	}
	observeStep("seal", start)
	// Sealed before (a pass that crashed after its commit, or whose release failed), the seal did
	// not wait for the list: the job is not released before it is done.
	if err := outside.wait(ctx); err != nil {
		return fmt.Errorf("finalize job %s: %w", klog.KObj(job), err)
	}
	reason, cause, location := sealed.Reason, sealed.Cause, sealed.Location

	set := map[string]string{tracking.ArchivedAtAnnotation: now.Format(time.RFC3339), tracking.ArchiveLocationAnnotation: location,
		tracking.ArchivedAsAnnotation: string(record.ArchiveArchived)}
	if reason != "" {
		set[tracking.ArchivedAsAnnotation], set[tracking.ArchivedReasonAnnotation] = string(record.ArchiveReleased), reason
	}
	start = time.Now()
	if err := r.releaseJob(ctx, job, set); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // its finalizer was removed by someone else and the job is gone
		}
		return fmt.Errorf("release job %s: %w", klog.KObj(job), err)
	}
	observeStep("release", start)

	r.released.Store(client.ObjectKeyFromObject(job), releasedJob{uid: job.UID, at: r.Clock.Now()})
	jobsArchivedTotal.Inc()
	if since := job.Status.State.LastTransitionTime.Time; tracking.IsTerminal(job.Status.State.Phase) && !since.IsZero() {
		releaseLatencySeconds.Observe(now.Sub(since).Seconds())
	}
	if reason != "" {
		releasesIncompleteTotal.WithLabelValues("job", cause).Inc()
		r.Recorder.Event(job, corev1.EventTypeWarning, "Released", reason)
	} else {
		r.Recorder.Eventf(job, corev1.EventTypeNormal, "Archived", "Archived to %s", location)
	}
	ctrl.LoggerFrom(ctx).Info("Archived job", "Job", klog.KObj(job), "location", location)
	return nil
}

// releaseJob sets the annotations on the job and removes the job finalizer, in one patch sent
// from the cached job. A JSON patch that tests each copy of our finalizer at its index
// (releasePatch), not a merge patch with
// an optimistic lock: Volcano rewrites a finished job's status as its pods are released, and each
// rewrite made the lock's resourceVersion stale (a conflict, a requeue after a backoff, the seal's
// reads again and a second PATCH; issue 28). What the lock kept, the test keeps: a merge patch
// replaces the whole finalizer list, this one removes ours at the index it tested, so a list
// changed under that index fails the patch and drops no one's finalizer. Annotations are added
// key by key; a job with none (never the webhook's: it sets the submitter's) keeps the lock, as
// adding the whole map would replace one added meanwhile.
func (r *JobReconciler) releaseJob(ctx context.Context, job *batchv1alpha1.Job, set map[string]string) error {
	if len(job.Annotations) == 0 {
		patch := client.MergeFromWithOptions(job.DeepCopy(), client.MergeFromWithOptimisticLock{})
		for k, v := range set {
			metav1.SetMetaDataAnnotation(&job.ObjectMeta, k, v)
		}
		controllerutil.RemoveFinalizer(job, tracking.JobFinalizer)
		return r.Client.Patch(ctx, job, patch)
	}
	patch, err := releasePatch(job, tracking.JobFinalizer, set)
	if err != nil {
		return err
	}
	return releaseError(r.Client.Patch(ctx, job, patch))
}

// errReleaseStale wraps a release patch the API server refused (422): a test failed, as obj changed
// under it since it was read (its UID, or its finalizer list). The reconcile is retried from the
// cache, which the change's event updates.
var errReleaseStale = errors.New("the object's UID or finalizers changed since it was read (the release patch's test failed)")

// releaseError is the error of a release patch: a refused test says so (the API server's message
// alone says only that the request was in error).
func releaseError(err error) error {
	if apierrors.IsInvalid(err) {
		return fmt.Errorf("%w: %w", errReleaseStale, err)
	}
	return err
}

// releasePatch is a JSON patch that removes finalizer from obj as read, and adds the annotations
// key by key: it tests obj's UID first (it may have been deleted and created again under its name
// since it was read, with our finalizer at the same index: TestReleaseJobRecreatedUnderItsName),
// then each copy of our finalizer at its index, so a list changed under those indexes fails the
// patch and drops no one's finalizer, while changes to anything else (a status rewritten) do not
// fail it.
func releasePatch(obj metav1.Object, finalizer string, annotations map[string]string) (client.Patch, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	ops := []op{{Op: "test", Path: "/metadata/uid", Value: string(obj.GetUID())}}
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations/" + tracking.PointerEscape(k), Value: annotations[k]})
	}
	// Every copy of ours (a tenant may write it twice), the highest index first: each removal
	// leaves the indexes below it as they were read.
	fs := obj.GetFinalizers()
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i] == finalizer {
			at := "/metadata/finalizers/" + strconv.Itoa(i)
			ops = append(ops, op{Op: "test", Path: at, Value: finalizer}, op{Op: "remove", Path: at})
		}
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encode the release patch: %w", err)
	}
	return client.RawPatch(types.JSONPatchType, raw), nil
}
