package archiver

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// oldestFirst enqueues an object's own key, as handler.EnqueueRequestForObject does, at a priority
// that puts older objects first on a priority queue (controller.Options.UsePriorityQueue).
//
// Why: the pods of a backlog (a burst of terminations, or a restart) arrive in no useful order,
// and a job is released only once all its pods are. Taken in any order, every job waits until
// nearly the whole backlog is done, and all of them finalize at once at the end. Taken oldest
// first, a job's pods (created together) go together, and jobs are released one after another
// while the rest of the backlog drains. Older first also means nothing starves: new work always
// ranks below what is already waiting. A requeue keeps the priority it was taken with.
var oldestFirst = handler.Funcs{
	CreateFunc:  func(_ context.Context, e event.CreateEvent, q requestQueue) { addByAge(q, e.Object) },
	UpdateFunc:  func(_ context.Context, e event.UpdateEvent, q requestQueue) { addByAge(q, e.ObjectNew) },
	DeleteFunc:  func(_ context.Context, e event.DeleteEvent, q requestQueue) { addByAge(q, e.Object) },
	GenericFunc: func(_ context.Context, e event.GenericEvent, q requestQueue) { addByAge(q, e.Object) },
}

func addByAge(q requestQueue, obj client.Object) {
	if obj == nil {
		return
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)}
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		q.Add(req)
		return
	}
	pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(agePriority(obj))}, req)
}

// agePriority ranks obj by its creation time, older higher. Creation times have a resolution of a
// second; objects of the same second keep the order they were added in.
func agePriority(obj client.Object) int {
	return -int(obj.GetCreationTimestamp().Unix())
}
