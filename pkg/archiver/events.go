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
	DeleteFunc:  func(event.DeleteEvent) bool { return !dropPodEventsOfJob },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		if dropPodEventsOfJob {
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

// dropPodEventsOfJob is a test hook, set by the environment variable
// JOBVAULT_TEST_DROP_POD_EVENTS_OF_JOB=1: every pod event meant for the job reconciler is lost,
// as a watch can lose events, so that a test can prove the resweep repairs what they would have
// done (a job whose pods were all released, never finalized). Never set it in production.
var dropPodEventsOfJob = os.Getenv("JOBVAULT_TEST_DROP_POD_EVENTS_OF_JOB") == "1"
