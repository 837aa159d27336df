package archiver

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
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

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// PodReconciler archives the container logs of every VcJob's pod (tracking.JobOf) outside the
// excluded namespaces: it captures every container run live from its start, records each run's
// log once it ended, and releases the pod finalizer only when the pod is finished (ended, or
// deleted and its containers stopped) and every log is recorded.
type PodReconciler struct {
	Deps
	Options
	// Captures runs the live captures of container logs.
	Captures *capture.Manager

	nodes nodeChecks
	// recorded skips the pod's upsert when its row would not change; recordCached fills it once.
	recorded       recordedState
	cachedRecorded sync.Once
	// logged holds the log rows of each pod's runs as this process recorded or found them.
	logged loggedRuns
	// starts queues the starts of each job's runs (startRun).
	starts jobStarts
}

// recordBatch is how many pod rows one statement reads or writes when the reconciler starts.
const recordBatch = 1000

// recordCached records this shard's cached pods before the first reconcile, recordBatch at a
// time: it reads their rows, writes in one statement each the rows that are missing or differ
// from what the pod's reconcile would write, and remembers them all. Every pod's reconcile then
// finds its row written. At a first start with 100,000 live pods that is 100 reads and 100
// writes instead of 100,000 round trips; at a restart, only what changed while it was down is
// written. A failure costs only speed: a pod not remembered is written by its reconcile, as
// before.
func (r *PodReconciler) recordCached(ctx context.Context) {
	log, start := ctrl.Log.WithName("pod"), time.Now()
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "Could not list the cached pods to record them; each is recorded by its reconcile instead")
		return
	}
	type cached struct {
		key         types.NamespacedName
		row         record.Pod
		fingerprint string
	}
	var pods []cached
	for i := range list.Items {
		p := &list.Items[i]
		// Only pods of a VcJob the cache confirms; the others' reconciles decide.
		if job, ok := ownerJob(p); ok && !r.excluded(p.Namespace) && r.Shard.Owns(types.UID(job.UID)) && r.jobInCache(ctx, job) {
			row := podRow(p, job)
			pods = append(pods, cached{client.ObjectKeyFromObject(p), row, podFingerprint(row)})
		}
	}
	list = corev1.PodList{}
	written := 0
	for batch := range slices.Chunk(pods, recordBatch) {
		uids := make([]string, len(batch))
		for i, p := range batch {
			uids[i] = p.row.UID
		}
		rows, err := r.Records.PodsByUID(ctx, uids)
		if err != nil {
			log.Error(err, "Could not read the records of the cached pods; the rest are recorded by their reconciles")
			return
		}
		was := make(map[string]string, len(rows))
		for _, row := range rows {
			was[row.UID] = podFingerprint(row)
		}
		var stale []record.Pod
		for _, p := range batch {
			if was[p.row.UID] != p.fingerprint {
				stale = append(stale, p.row)
			}
		}
		if err := r.Records.UpsertPods(ctx, stale); err != nil {
			log.Error(err, "Could not record the cached pods; the rest are recorded by their reconciles")
			return
		}
		for _, p := range batch {
			r.recorded.set(p.key, p.fingerprint)
		}
		written += len(stale)
	}
	log.Info("Recorded the cached pods", "pods", len(pods), "written", written, "took", time.Since(start).Round(time.Millisecond))
}

// Reconcile archives what the pod's current state calls for. It works from state alone, so a
// crash at any point is repaired by the next pass: object keys are deterministic and rows upserts.
func (r *PodReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	r.cachedRecorded.Do(func() { r.recordCached(ctx) })
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.recorded.forget(req.NamespacedName)
			r.logged.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.excluded(pod.Namespace) {
		return ctrl.Result{}, nil // in a namespace jobvault never tracks
	}
	job, ok := ownerJob(pod)
	if ok && !r.Shard.Owns(types.UID(job.UID)) {
		return ctrl.Result{}, nil // another shard's
	}
	if ok {
		// The reference is the pod's claim, not a fact: it must name a VcJob of its namespace.
		if why, err := r.notJobOf(ctx, pod.Namespace, job); err != nil || why != "" {
			if err != nil {
				return ctrl.Result{}, err
			}
			return ctrl.Result{}, r.refuse(ctx, pod, why)
		}
	} else {
		if !controllerutil.ContainsFinalizer(pod, tracking.PodFinalizer) {
			return ctrl.Result{}, nil // not a VcJob's pod
		}
		if mine, err := r.ownsLoose(ctx, pod); err != nil || !mine {
			return ctrl.Result{}, err
		}
		var done bool
		if job, done, err = r.orphaned(ctx, pod); err != nil || done {
			return ctrl.Result{}, err
		}
	}
	if why := r.invalidKeys(pod, job); why != "" {
		return ctrl.Result{}, r.refuse(ctx, pod, why)
	}
	if err := r.recordPod(ctx, pod, job); err != nil {
		if errors.Is(err, db.ErrConflict) {
			// Its row is another job's (its reference changed) or a job of another namespace's:
			// the database refuses to move it, and so does the archiver.
			return ctrl.Result{}, r.refuse(ctx, pod, fmt.Sprintf("it is recorded under another job than its controlling VcJob %s (%v)", job.Name, err))
		}
		return ctrl.Result{}, err
	}
	if !controllerutil.ContainsFinalizer(pod, tracking.PodFinalizer) {
		if pod.DeletionTimestamp != nil || podEnded(pod) || releaseReason(pod) != "" {
			r.logged.forget(req.NamespacedName)
			return ctrl.Result{}, nil // released already, or by an operator
		}
		// A released pod stays released, even when its release annotation is gone: adding the
		// finalizer back would start a release all over again.
		if row, err := r.Records.Pod(ctx, string(pod.UID)); err != nil {
			return ctrl.Result{}, fmt.Errorf("read record of pod %s: %w", klog.KObj(pod), err)
		} else if row.ArchiveState == record.ArchiveArchived || row.ArchiveState == record.ArchiveReleased {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, r.addPodFinalizer(ctx, pod) // the webhook missed it
	}
	waiting, live, logs, err := r.archiveLogs(ctx, pod, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if waiting {
		if !live && pod.DeletionTimestamp == nil {
			// Only containers that have not started yet: their start is a pod event. Without this,
			// every pending pod came back every retryAfter: 10,000 reconciles a second for 100,000.
			return ctrl.Result{}, nil
		}
		// Captures in flight requeue the pod when they end; the periodic look is a safety net
		// (a capture waiting for a slot, a grace period running out).
		return ctrl.Result{RequeueAfter: r.retryAfter()}, nil
	}
	if !r.finished(ctx, pod) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.release(ctx, pod, job, logs)
}

// retryAfter spaces attempts to read a log that failed; bounded so a short deadline is honoured.
func (r *PodReconciler) retryAfter() time.Duration {
	return min(10*time.Second, max(r.LogDeadline/10, 100*time.Millisecond))
}

// podEnded reports whether every container of the pod has stopped for good.
func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func releaseReason(obj metav1.Object) string {
	if v, ok := obj.GetAnnotations()[tracking.ReleaseAnnotation]; ok {
		if v == "" {
			v = "released by operator"
		}
		return "released by operator: " + v
	}
	return ""
}

// ownerJob is the VcJob whose pod this is (tracking.JobOf), if any.
func ownerJob(pod *corev1.Pod) (archive.JobRef, bool) {
	o, ok := tracking.JobOf(pod)
	if !ok {
		return archive.JobRef{}, false
	}
	return archive.JobRef{Namespace: pod.Namespace, Name: o.Name, UID: string(o.UID)}, true
}

// orphaned finds the job of a pod that holds our finalizer but that no VcJob controls. One the
// garbage collector orphaned (`kubectl delete vcjob --cascade=orphan` strips the owner references
// of the pods the user keeps) is still archived, under the job it was recorded with, and released
// when it ends, as long as that job is not sealed; once it is (the job does not wait for such
// pods), the pod is let go: a sealed record takes nothing more. One never recorded (a copy that carried the finalizer along) has nothing to be
// archived under: it is let go at once (done).
func (r *PodReconciler) orphaned(ctx context.Context, pod *corev1.Pod) (job archive.JobRef, done bool, err error) {
	row, err := r.Records.Pod(ctx, string(pod.UID))
	switch {
	case errors.Is(err, db.ErrNotFound):
		return archive.JobRef{}, true, r.letGo(ctx, pod, "not a pod of any VcJob jobvault recorded")
	case err != nil:
		return archive.JobRef{}, false, fmt.Errorf("read record of pod %s: %w", klog.KObj(pod), err)
	}
	if jr, err := r.Records.Job(ctx, row.JobUID); err != nil && !errors.Is(err, db.ErrNotFound) {
		return archive.JobRef{}, false, fmt.Errorf("read record of the job of pod %s: %w", klog.KObj(pod), err)
	} else if err == nil && jr.ArchiveState != record.ArchivePending {
		// Its job was sealed before it ended, its record saying that this pod was not archived:
		// nothing may be added to a sealed record (db.ErrFinalized).
		return archive.JobRef{}, true, r.letGo(ctx, pod, "its job was sealed before it ended (deleted with its pods orphaned): its logs are not in the job's archive")
	}
	return archive.JobRef{Namespace: pod.Namespace, Name: pod.Labels[tracking.JobPodLabel], UID: row.JobUID}, false, nil
}

// invalidKeys says why the pod's logs have no valid key (archive.Layout refuses a component),
// "" if they have: such a pod is let go before anything is captured. The API server validates
// every name and UID that makes a key, so this holds only if it did not.
func (r *PodReconciler) invalidKeys(pod *corev1.Pod, job archive.JobRef) string {
	for _, c := range statuses(pod) {
		if _, err := r.Layout.PodLog(job, pod.Name, string(pod.UID), c.Name, record.InstanceCurrent); err != nil {
			return fmt.Sprintf("its logs cannot be given a key: %v", err)
		}
	}
	return ""
}

// letGo removes the pod finalizer from a pod jobvault cannot archive, with an Event saying why.
func (d Deps) letGo(ctx context.Context, pod client.Object, why string) error {
	patch := client.MergeFromWithOptions(pod.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(pod, tracking.PodFinalizer)
	if err := d.Client.Patch(ctx, pod, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("let go of pod %s: %w", klog.KObj(pod), err)
	}
	releasesIncompleteTotal.WithLabelValues("pod", "untracked").Inc()
	d.Recorder.Event(pod, corev1.EventTypeWarning, "Released", "Released without archiving: "+why)
	ctrl.LoggerFrom(ctx).Info("Let go of a pod jobvault cannot archive", "Pod", klog.KObj(pod), "why", why)
	return nil
}

func (r *PodReconciler) recordPod(ctx context.Context, pod *corev1.Pod, job archive.JobRef) error {
	row := podRow(pod, job)
	key, fingerprint := client.ObjectKeyFromObject(pod), podFingerprint(row)
	if r.recorded.same(key, fingerprint) {
		return nil
	}
	if err := r.Records.UpsertPod(ctx, row); err != nil {
		return fmt.Errorf("record pod %s: %w", klog.KObj(pod), err)
	}
	r.recorded.set(key, fingerprint)
	return nil
}

// podRow is what is recorded of the pod, a pod of job.
func podRow(pod *corev1.Pod, job archive.JobRef) record.Pod {
	row := record.Pod{UID: string(pod.UID), JobUID: job.UID, Namespace: pod.Namespace, Name: pod.Name,
		Task: pod.Labels[volcanoTaskLabel], Node: pod.Spec.NodeName, Phase: string(pod.Status.Phase),
		CreatedAt: pod.CreationTimestamp.Time, DeletedBeforeTerminal: pod.DeletionTimestamp != nil && !podEnded(pod)}
	if pod.Status.StartTime != nil {
		row.StartedAt = &pod.Status.StartTime.Time
	}
	if podEnded(pod) {
		row.FinishedAt = lastFinish(pod)
	}
	return row
}

// podFingerprint is a hash of everything UpsertPod writes of the row (a few bytes per cached pod).
func podFingerprint(p record.Pod) string {
	t := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	h := fnv.New128a()
	fmt.Fprintf(h, "%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%t", p.UID, p.JobUID, p.Namespace, p.Name, p.Task, p.Node, p.Phase,
		p.CreatedAt.UTC().Format(time.RFC3339Nano), t(p.StartedAt), t(p.FinishedAt), p.DeletedBeforeTerminal)
	return string(h.Sum(nil))
}

// addPodFinalizer adds the finalizer with an optimistic lock: a merge patch replaces the whole
// list, so a stale cached pod would drop a finalizer someone else added meanwhile.
func (r *PodReconciler) addPodFinalizer(ctx context.Context, pod *corev1.Pod) error {
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(pod, tracking.PodFinalizer)
	if err := r.Client.Patch(ctx, pod, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile: nothing to hold
		}
		return fmt.Errorf("add finalizer to pod %s: %w", klog.KObj(pod), err)
	}
	ctrl.LoggerFrom(ctx).Info("Added missing pod finalizer", "Pod", klog.KObj(pod))
	return nil
}

// podIncomplete says why the pod's archive is incomplete ("" when it is not), from its log
// records: an operator's release, logs that could not be read, gaps.
func (r *PodReconciler) podIncomplete(ctx context.Context, pod *corev1.Pod, job archive.JobRef, logs []record.LogObject) (reason, cause string, err error) {
	if !mayHaveGaps(logs) {
		reason, cause = incompleteReason(releaseReason(pod), nil, logs, nil)
		return reason, cause, nil
	}
	all, err := r.Records.Gaps(ctx, job.UID)
	if err != nil {
		return "", "", fmt.Errorf("read log gaps of pod %s: %w", klog.KObj(pod), err)
	}
	var gaps []record.Gap
	for _, g := range all {
		if g.PodUID == string(pod.UID) {
			gaps = append(gaps, g)
		}
	}
	reason, cause = incompleteReason(releaseReason(pod), nil, logs, gaps)
	return reason, cause, nil
}

// mayHaveGaps reports whether any of a pod's log records may have gaps recorded beside it. A log
// is recorded last, once its run's gaps are (recordRun), and names them in its reason: a pod whose
// logs are all stored without a reason, or never started, has none, and its release need not read
// them.
func mayHaveGaps(logs []record.LogObject) bool {
	for _, l := range logs {
		if l.Reason != "" && l.Reason != neverStarted {
			return true
		}
	}
	return false
}

// release records the pod as archived (or released, with the reason) and then removes the
// finalizer. logs are the pod's log records, all of them recorded. A pod that ended is released by
// a JSON patch that tests our finalizer at its index (releasePatch): its runs are final, so what
// changes meanwhile (the node's status writes: 1.5 a pod in a burst, issue 28 target 5) cannot
// change what was decided, and must not fail the release (a conflict, a requeue after a backoff,
// a second PATCH). Any other pod (being deleted, released by an operator, its node lost) keeps the
// optimistic lock, so a concurrent change is seen before the pod can vanish.
func (r *PodReconciler) release(ctx context.Context, pod *corev1.Pod, job archive.JobRef, logs []record.LogObject) error {
	var reason, cause string
	// Marked archived with its last log (recordRun), complete: nothing to read or write.
	if _, archived := r.logged.known(client.ObjectKeyFromObject(pod), pod.UID); !archived || releaseReason(pod) != "" {
		var err error
		if reason, cause, err = r.podIncomplete(ctx, pod, job, logs); err != nil {
			return err
		}
		if err := r.Records.MarkPodArchived(ctx, string(pod.UID), r.Clock.Now(), reason); err != nil {
			return fmt.Errorf("mark pod %s archived: %w", klog.KObj(pod), err)
		}
	}
	var patch client.Patch
	if podEnded(pod) {
		var err error
		if patch, err = releasePatch(pod, tracking.PodFinalizer, nil); err != nil {
			return err
		}
	} else {
		patch = client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(pod, tracking.PodFinalizer)
	}
	if err := r.Client.Patch(ctx, pod, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // its finalizer was removed by someone else and the pod is gone
		}
		return fmt.Errorf("release pod %s: %w", klog.KObj(pod), releaseError(err))
	}
	r.logged.forget(client.ObjectKeyFromObject(pod))
	podsArchivedTotal.Inc()
	if reason != "" {
		releasesIncompleteTotal.WithLabelValues("pod", cause).Inc()
		r.Recorder.Event(pod, corev1.EventTypeWarning, "Released", reason)
	}
	ctrl.LoggerFrom(ctx).Info("Released pod", "Pod", klog.KObj(pod), "reason", reason)
	return nil
}
