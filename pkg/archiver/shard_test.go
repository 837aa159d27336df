package archiver

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kuberecord "k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/shard"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// TestPodReconcilerShardAndPending: a pod of another shard's job is left alone (not recorded, no
// requeue); a pod of this shard's whose containers have not started is recorded and not requeued
// (its start is an event: a periodic requeue made 100,000 pending pods 10,000 reconciles a
// second).
func TestPodReconcilerShardAndPending(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	const jobUID = "job-uid"
	mine := shard.Of(jobUID, 3)
	pod := func(deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-w-0", UID: "pod-uid", CreationTimestamp: now,
			Labels:          map[string]string{tracking.JobPodLabel: "train"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: jobAPIVersion, Kind: "Job", Name: "train", UID: jobUID, Controller: ptr.To(true)}},
			Finalizers:      []string{tracking.PodFinalizer}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
		p.Status.Phase = corev1.PodPending
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	for name, tc := range map[string]struct {
		shard    int
		deleting bool
		recorded bool
		requeue  bool
	}{
		"another shard's":            {shard: (mine + 1) % 3},
		"this shard's, pending":      {shard: mine, recorded: true},
	} {
		t.Run(name, func(t *testing.T) {
			p := pod(tc.deleting)
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(p).Build()
			records := &memRecords{jobs: map[string]record.Job{}, pods: map[string]record.Pod{}}
			o := DefaultOptions()
			o.Shard = shard.Shard{Index: tc.shard, Total: 3}
			r := &PodReconciler{Deps: Deps{Client: c, Records: records, Recorder: kuberecord.NewFakeRecorder(10),
				Clock: clocktesting.NewFakePassiveClock(now.Time)}, Options: o}
			res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
			if err != nil {
				t.Fatal(err)
			}
			if recorded := len(records.pods) == 1; recorded != tc.recorded || (res.RequeueAfter > 0) != tc.requeue {
				t.Errorf("recorded %v, requeue after %s; want recorded %v, requeue %v", recorded, res.RequeueAfter, tc.recorded, tc.requeue)
			}
		})
	}
}
