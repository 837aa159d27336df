package archiver

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// podEventsOfJob lets through only the pod events that can change what the job reconciler
// decides: a pod's finalizer added or removed (the job waits for every pod to be released) and a
// pod gone. A pod's phase and container changes, its creation and the archiver's own captures are
// the pod reconciler's business: before this filter every one of them reconciled the job again,
// about ten per pod, each rewriting the job's row and listing its pods. The job's own events
// (Volcano updates its status as pods change) reconcile it as before.
var podEventsOfJob = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*corev1.Pod)
		cur, okNew := e.ObjectNew.(*corev1.Pod)
		if !okOld || !okNew {
			return true
		}
		return controllerutil.ContainsFinalizer(old, tracking.PodFinalizer) != controllerutil.ContainsFinalizer(cur, tracking.PodFinalizer)
	},
}
