package archiver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// A pod asserts which VcJob it belongs to (its controlling ownerReference), and the API server
// checks only that the reference's name and UID are not empty: a tenant can point a pod of its
// own at another namespace's job. The archiver files a pod under a job only once the job is
// confirmed here; a pod whose reference does not resolve is never recorded or captured under
// any job, and its pod finalizer is released with an Event saying why (notJobOf, refuse).

// notJobOf says why job, the pod's controlling VcJob reference, is not a job the pod belongs to
// ("" when it is): it must be a VcJob of the pod's own namespace with exactly that name and UID.
// The cache is asked first; a miss is confirmed with the API server, as the pod informer can
// deliver a pod before the VcJob informer delivers its job, once (ownerMisses).
func (d Deps) notJobOf(ctx context.Context, namespace string, job archive.JobRef) (string, error) {
	if err := job.Validate(); err != nil {
		return fmt.Sprintf("its controlling owner reference names no VcJob of namespace %s: %v", namespace, err), nil
	}
	if job.Namespace != namespace {
		return fmt.Sprintf("its controlling VcJob %s/%s is not of its namespace %s", job.Namespace, job.Name, namespace), nil
	}
	var cached batchv1alpha1.Job // only its UID is read: not copied out of the cache
	err := d.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: job.Name}, &cached, client.UnsafeDisableDeepCopy)
	if err == nil && string(cached.UID) == job.UID {
		return "", nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("look up VcJob %s/%s: %w", namespace, job.Name, err)
	}
	denied := fmt.Sprintf("its controlling owner reference names VcJob %s with UID %s, and namespace %s has no such VcJob",
		job.Name, job.UID, namespace)
	if d.owners.has(job) {
		return denied, nil
	}
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(batchv1alpha1.SchemeGroupVersion.WithKind("Job"))
	err = d.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: job.Name}, live)
	switch {
	case err == nil && string(live.UID) == job.UID:
		return "", nil
	case err == nil, apierrors.IsNotFound(err):
		d.owners.add(job)
		return denied, nil
	}
	return "", fmt.Errorf("look up VcJob %s/%s: %w", namespace, job.Name, err)
}

// ownerMisses remembers the claims (namespace, name, UID of a VcJob) that the API server denied:
// the cache has no such job, so each reconcile of such a pod would ask the API server again, and
// a tenant can cause reconciles at will (by updating its pods). The API server's answer holds, as
// UIDs are never reused. It holds at most max claims; the oldest go first. A nil one remembers
// nothing.
type ownerMisses struct {
	mu    sync.Mutex
	max   int
	held  map[archive.JobRef]bool
	order []archive.JobRef // oldest first
}

// ownerMissesMax bounds what the archiver remembers of denied claims: 64 bytes or so each.
const ownerMissesMax = 16384

func newOwnerMisses(limit int) *ownerMisses {
	return &ownerMisses{max: limit, held: map[archive.JobRef]bool{}}
}

func (m *ownerMisses) has(job archive.JobRef) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held[job]
}

func (m *ownerMisses) add(job archive.JobRef) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[job] {
		return
	}
	if len(m.order) >= m.max {
		delete(m.held, m.order[0])
		m.order = m.order[1:]
	}
	m.held[job] = true
	m.order = append(m.order, job)
}

func (m *ownerMisses) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.held)
}

// jobInCache reports whether the cache holds a VcJob of job's namespace with its name and UID: a
// cheap check for batches (recordCached), which leave the rest to each pod's reconcile.
func (d Deps) jobInCache(ctx context.Context, job archive.JobRef) bool {
	if job.Validate() != nil {
		return false
	}
	var cached batchv1alpha1.Job // only its UID is read: not copied out of the cache
	err := d.Client.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: job.Name}, &cached, client.UnsafeDisableDeepCopy)
	return err == nil && string(cached.UID) == job.UID
}

// refuse handles a pod that claims a job it does not belong to (why says how): nothing is written
// under any job. A pod recorded before under a job it did belong to (its reference changed since)
// is recorded released there, so that job's record says it is incomplete. The pod finalizer, if
// any, is released with an Event.
func (d Deps) refuse(ctx context.Context, pod client.Object, why string) error {
	if err := d.markReleased(ctx, pod, "released without archiving: "+why); err != nil {
		return err
	}
	if !controllerutil.ContainsFinalizer(pod, tracking.PodFinalizer) {
		ctrl.LoggerFrom(ctx).V(1).Info("Not archiving a pod of no VcJob", "Pod", klog.KObj(pod), "why", why)
		return nil
	}
	return d.letGo(ctx, pod, why)
}

// markReleased records the pod released for reason, if it has a row (a pod never recorded has
// nothing to mark).
func (d Deps) markReleased(ctx context.Context, pod client.Object, reason string) error {
	err := d.Records.MarkPodArchived(ctx, string(pod.GetUID()), d.Clock.Now(), reason)
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		return fmt.Errorf("mark pod %s released: %w", klog.KObj(pod), err)
	}
	return nil
}

// outOfView is the kind of reason a log is recorded unavailable for when its pod left the
// archiver's view before the log was archived.
const outOfView = "out of the archiver's view"

// recordReleased records a pod of job that left the archiver's view before it was archived: a row
// under the job if it had none, each of its container runs not stored recorded unavailable for
// why, and the pod released. The job's seal then finds them, and the job is released with the
// reason, never archived without them.
func (d Deps) recordReleased(ctx context.Context, pod client.Object, job archive.JobRef, why string) error {
	if _, err := d.Records.Pod(ctx, string(pod.GetUID())); errors.Is(err, db.ErrNotFound) {
		row := record.Pod{UID: string(pod.GetUID()), JobUID: job.UID, Namespace: pod.GetNamespace(), Name: pod.GetName(),
			CreatedAt: pod.GetCreationTimestamp().Time, DeletedBeforeTerminal: pod.GetDeletionTimestamp() != nil}
		if err := d.Records.UpsertPod(ctx, row); err != nil {
			return fmt.Errorf("record pod %s: %w", klog.KObj(pod), err)
		}
	} else if err != nil {
		return fmt.Errorf("read record of pod %s: %w", klog.KObj(pod), err)
	}
	// The whole pod, for its containers (the caller has its metadata only).
	var full corev1.Pod
	if err := d.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), &full); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("read pod %s: %w", klog.KObj(pod), err)
	}
	for _, cr := range podRuns(&full) {
		reason := outOfView + ": " + why
		if cr.never {
			reason = neverStarted
		}
		// A stored log stays stored: PutLogObject ignores an unavailable write for it.
		l := record.LogObject{PodUID: string(pod.GetUID()), Container: cr.container, ContainerType: cr.ctype, Instance: cr.instance,
			State: record.LogUnavailable, Reason: reason}
		if err := d.Records.PutLogObject(ctx, l); errors.Is(err, db.ErrFinalized) {
			break // its job is sealed already, without it: the record says so and stays as it is
		} else if err != nil {
			return fmt.Errorf("record log %s of pod %s unavailable: %w", cr.container, klog.KObj(pod), err)
		}
	}
	return d.markReleased(ctx, pod, "released without archiving: "+why)
}
