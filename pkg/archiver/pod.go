package archiver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// PodReconciler archives the container logs of tracked pods: the previous instance whenever a
// container restarts, every container's last instance once the pod ends or is being deleted, and
// only then releases the pod finalizer.
type PodReconciler struct {
	Deps
	Options
}

// Reconcile archives what the pod's current state calls for. It works from state alone, so a
// crash at any point is repaired by the next pass: object keys are deterministic and rows upserts.
func (r *PodReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !tracking.IsTracked(pod.Labels) {
		return ctrl.Result{}, nil
	}
	job, ok := ownerJob(pod)
	if !ok {
		return ctrl.Result{}, nil // a tracked label on a pod no VcJob owns: nothing to file it under
	}
	if err := r.recordPod(ctx, pod, job); err != nil {
		return ctrl.Result{}, err
	}
	if !controllerutil.ContainsFinalizer(pod, tracking.PodFinalizer) {
		if pod.DeletionTimestamp != nil || podEnded(pod) {
			return ctrl.Result{}, nil // released already
		}
		return ctrl.Result{}, r.addPodFinalizer(ctx, pod) // the webhook missed it
	}
	waiting, err := r.archiveLogs(ctx, pod, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if waiting {
		// Some log could not be read yet and its deadline has not passed: try again (also for a
		// running pod's previous instance, which no later event may bring back).
		return ctrl.Result{RequeueAfter: r.retryAfter()}, nil
	}
	if !podFinished(pod) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.release(ctx, pod)
}

// retryAfter spaces attempts to read a log that failed; bounded so a short deadline is honoured.
func (r *PodReconciler) retryAfter() time.Duration {
	return min(10*time.Second, max(r.LogDeadline/10, 100*time.Millisecond))
}

// podEnded reports whether every container of the pod has stopped for good.
func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// podFinished reports whether the pod's last logs are due: it ended, is being deleted or an
// operator released it.
func podFinished(pod *corev1.Pod) bool {
	return podEnded(pod) || pod.DeletionTimestamp != nil || releaseReason(pod) != ""
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

func ownerJob(pod *corev1.Pod) (archive.JobRef, bool) {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "Job" && o.APIVersion == jobAPIVersion && o.Controller != nil && *o.Controller {
			return archive.JobRef{Namespace: pod.Namespace, Name: o.Name, UID: string(o.UID)}, true
		}
	}
	return archive.JobRef{}, false
}

func (r *PodReconciler) recordPod(ctx context.Context, pod *corev1.Pod, job archive.JobRef) error {
	row := record.Pod{UID: string(pod.UID), JobUID: job.UID, Namespace: pod.Namespace, Name: pod.Name,
		Task: pod.Labels[volcanoTaskLabel], Node: pod.Spec.NodeName, Phase: string(pod.Status.Phase),
		CreatedAt: pod.CreationTimestamp.Time, DeletedBeforeTerminal: pod.DeletionTimestamp != nil && !podEnded(pod)}
	if pod.Status.StartTime != nil {
		row.StartedAt = &pod.Status.StartTime.Time
	}
	if podEnded(pod) {
		row.FinishedAt = lastFinish(pod)
	}
	if err := r.Records.UpsertPod(ctx, row); err != nil {
		return fmt.Errorf("record pod %s: %w", klog.KObj(pod), err)
	}
	return nil
}

func (r *PodReconciler) addPodFinalizer(ctx context.Context, pod *corev1.Pod) error {
	patch := client.MergeFrom(pod.DeepCopy())
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

// release records the pod as archived (or released, with the reason) and then removes the
// finalizer, with an optimistic lock so a concurrent change is seen before the pod can vanish.
func (r *PodReconciler) release(ctx context.Context, pod *corev1.Pod) error {
	reason := releaseReason(pod)
	if err := r.Records.MarkPodArchived(ctx, string(pod.UID), r.Clock.Now(), reason); err != nil {
		return fmt.Errorf("mark pod %s archived: %w", klog.KObj(pod), err)
	}
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(pod, tracking.PodFinalizer)
	if err := r.Client.Patch(ctx, pod, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // its finalizer was removed by someone else and the pod is gone
		}
		return fmt.Errorf("release pod %s: %w", klog.KObj(pod), err)
	}
	podsArchivedTotal.Inc()
	if reason != "" {
		releasesIncompleteTotal.WithLabelValues("pod", "operator").Inc()
		r.Recorder.Event(pod, corev1.EventTypeWarning, "Released", reason)
	}
	ctrl.LoggerFrom(ctx).Info("Released pod", "Pod", klog.KObj(pod), "reason", reason)
	return nil
}

// logInstance is one container log the pod's state says must be archived.
type logInstance struct {
	container string
	ctype     record.ContainerType
	instance  string
	previous  bool
	// due is when the log became complete: the deadline counts from here.
	due time.Time
	// unavailable, when set, records the instance as unavailable without trying to read it.
	unavailable string
}

// wantedLogs lists the log instances due for the pod in its current state.
func wantedLogs(pod *corev1.Pod) []logInstance {
	finished := podFinished(pod)
	finishedAt := pod.CreationTimestamp.Time
	if pod.DeletionTimestamp != nil {
		finishedAt = pod.DeletionTimestamp.Time
	} else if t := lastFinish(pod); t != nil {
		finishedAt = *t
	}
	var out []logInstance
	add := func(specs []string, statuses []corev1.ContainerStatus, ctype record.ContainerType) {
		byName := map[string]corev1.ContainerStatus{}
		for _, s := range statuses {
			byName[s.Name] = s
		}
		for _, name := range specs {
			s, ok := byName[name]
			for n := int32(1); ok && n <= s.RestartCount; n++ {
				li := logInstance{container: name, ctype: ctype, instance: record.PreviousInstance(n), previous: true, due: finishedAt}
				if n < s.RestartCount {
					// The kubelet keeps only the last previous instance.
					li.unavailable = "the container restarted again before this instance was archived"
				} else if t := s.LastTerminationState.Terminated; t != nil {
					li.due = t.FinishedAt.Time
				}
				out = append(out, li)
			}
			if !finished {
				continue
			}
			li := logInstance{container: name, ctype: ctype, instance: record.InstanceCurrent, due: finishedAt}
			if !ok || (s.State.Running == nil && s.State.Terminated == nil && s.RestartCount == 0) {
				li.unavailable = "the container never started"
			}
			out = append(out, li)
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

func lastFinish(pod *corev1.Pod) *time.Time {
	var last *time.Time
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			if t := s.State.Terminated; t != nil && (last == nil || t.FinishedAt.After(*last)) {
				ft := t.FinishedAt.Time
				last = &ft
			}
		}
	}
	return last
}

// archiveLogs archives every due log instance not recorded yet. It reports waiting when some log
// could not be read and is still within its deadline. Store and database failures are returned:
// they are retried without limit, since releasing on them would lose logs that still exist.
func (r *PodReconciler) archiveLogs(ctx context.Context, pod *corev1.Pod, job archive.JobRef) (waiting bool, err error) {
	recorded, err := r.Records.PodLogObjects(ctx, string(pod.UID))
	if err != nil {
		return false, fmt.Errorf("read log records of pod %s: %w", klog.KObj(pod), err)
	}
	done := map[string]record.LogState{}
	for _, l := range recorded {
		done[l.Container+"/"+l.Instance] = l.State
	}
	release := releaseReason(pod)
	for _, li := range wantedLogs(pod) {
		state, seen := done[li.container+"/"+li.instance]
		if state == record.LogStored || (seen && li.unavailable != "") {
			continue
		}
		row := record.LogObject{PodUID: string(pod.UID), Container: li.container, ContainerType: li.ctype, Instance: li.instance}
		if li.unavailable != "" {
			row.State, row.Reason = record.LogUnavailable, li.unavailable
		} else {
			stored, err := r.upload(ctx, pod, job, li)
			switch {
			case err == nil:
				row.State, row.ObjectKey, row.Bytes, row.StoredBytes, row.SHA256 = record.LogStored, stored.Key, stored.Bytes, stored.StoredBytes, stored.SHA256
			case !archive.IsSourceError(err):
				archiveFailuresTotal.WithLabelValues("store").Inc()
				return false, err
			case seen:
				continue // recorded unavailable already; this retry found it still unreadable
			case release != "":
				row.State, row.Reason = record.LogUnavailable, fmt.Sprintf("%s (log unreadable: %v)", release, err)
			case r.Clock.Since(li.due) >= r.LogDeadline:
				row.State, row.Reason = record.LogUnavailable, fmt.Sprintf("deadline of %s passed: %v", r.LogDeadline, err)
				releasesIncompleteTotal.WithLabelValues("pod", "deadline").Inc()
				r.Recorder.Eventf(pod, corev1.EventTypeWarning, "LogUnavailable", "Log of container %s (%s) recorded as unavailable: %s", li.container, li.instance, row.Reason)
			default:
				archiveFailuresTotal.WithLabelValues("log-unreadable").Inc()
				ctrl.LoggerFrom(ctx).Info("Log not readable yet, will retry", "Pod", klog.KObj(pod), "container", li.container, "instance", li.instance, "error", err.Error())
				waiting = true
				continue
			}
		}
		if err := r.Records.PutLogObject(ctx, row); err != nil {
			archiveFailuresTotal.WithLabelValues("database").Inc()
			return false, fmt.Errorf("record log %s of pod %s: %w", row, klog.KObj(pod), err)
		}
		if row.State == record.LogStored {
			logBytesArchivedTotal.Add(float64(row.Bytes))
		}
	}
	return waiting, nil
}

func (r *PodReconciler) upload(ctx context.Context, pod *corev1.Pod, job archive.JobRef, li logInstance) (archive.Stored, error) {
	ctx, cancel := context.WithTimeout(ctx, r.LogTimeout)
	defer cancel()
	src, err := r.Logs.Open(ctx, pod.Namespace, pod.Name, li.container, li.previous)
	if err != nil {
		return archive.Stored{}, &archive.SourceError{Err: fmt.Errorf("open log of %s container %s: %w", klog.KObj(pod), li.container, err)}
	}
	defer src.Close()
	key := r.Layout.PodLog(job, pod.Name, string(pod.UID), li.container, li.instance)
	return archive.Upload(ctx, r.Store, key, src)
}
