package archiver

import (
	"cmp"
	"context"
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// podEvents enqueues a pod's own key on each of its events, as handler.EnqueueRequestForObject
// does, but for the creates of the cache's initial list: enqueueCached enqueues those, oldest first.
var podEvents = handler.Funcs{
	CreateFunc: func(_ context.Context, e event.CreateEvent, q requestQueue) {
		if !e.IsInInitialList {
			enqueue(q, e.Object)
		}
	},
	UpdateFunc: func(_ context.Context, e event.UpdateEvent, q requestQueue) { enqueue(q, e.ObjectNew) },
	DeleteFunc: func(_ context.Context, e event.DeleteEvent, q requestQueue) { enqueue(q, e.Object) },
}

func enqueue(q requestQueue, obj client.Object) {
	if obj != nil {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	}
}

// enqueueCached sends a key of every cached pod that mine accepts into events, oldest first and a
// job's pods together, once the cache has synced: what the pod reconciler has to do at start, in
// the order it should be done.
//
// Why: at a start the backlog (pods that ended while the archiver was down, or a burst) comes from
// the cache's list in no useful order (a watch list arrives through a map), and a job is released
// only once all its pods are. Taken in that order, every job waits until nearly the whole backlog
// is done, and they all finalize at its end. Taken oldest first, jobs are released one after
// another while the rest drains. The queue is first in, first out, so the order holds for what is
// enqueued here; events after the start are taken as they come.
func enqueueCached(ctx context.Context, c cache.Cache, mine func(client.Object) bool, events chan<- event.GenericEvent) error {
	if !c.WaitForCacheSync(ctx) {
		return nil // stopping
	}
	var list corev1.PodList
	if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return errors.Join(errors.New("list the cached pods to reconcile them at start"), err)
	}
	var keys []*corev1.Pod
	for i := range list.Items {
		if p := &list.Items[i]; mine(p) {
			keys = append(keys, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name,
				CreationTimestamp: p.CreationTimestamp, OwnerReferences: controllerOnly(p.OwnerReferences)}})
		}
	}
	list = corev1.PodList{}
	slices.SortFunc(keys, oldestFirst)
	for _, p := range keys {
		select {
		case events <- event.GenericEvent{Object: p}:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// oldestFirst orders pods by creation (a second's resolution), then by their controller (a job's
// pods, created together, stay together), then by namespace and name.
func oldestFirst(a, b *corev1.Pod) int {
	return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
		cmp.Compare(controllerUID(a), controllerUID(b)), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

func controllerUID(p *corev1.Pod) string {
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		return string(ref.UID)
	}
	return ""
}

func controllerOnly(refs []metav1.OwnerReference) []metav1.OwnerReference {
	for _, ref := range refs {
		if ref.Controller != nil && *ref.Controller {
			return []metav1.OwnerReference{ref}
		}
	}
	return nil
}
