package archiver

import (
	"os"

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
	DeleteFunc:  func(event.DeleteEvent) bool { return !dropJobUpdates },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		if dropJobUpdates {
			return false
		}
		old, okOld := e.ObjectOld.(*corev1.Pod)
		cur, okNew := e.ObjectNew.(*corev1.Pod)
		if !okOld || !okNew {
			return true
		}
		return controllerutil.ContainsFinalizer(old, tracking.PodFinalizer) != controllerutil.ContainsFinalizer(cur, tracking.PodFinalizer)
	},
}

// dropJobUpdates is a test hook, set by the environment variable
// JOBVAULT_TEST_DROP_JOB_UPDATES=1: every update event of a job, and every pod event meant for the
// job reconciler, is lost, as a watch can lose events: a job is reconciled when it is created and
// then only by the resweep, which a test proves enough. Never set it in production.
var dropJobUpdates = os.Getenv("JOBVAULT_TEST_DROP_JOB_UPDATES") == "1"

// jobEvents lets every event of a job through, but for dropJobUpdates.
var jobEvents = predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return !dropJobUpdates }}
