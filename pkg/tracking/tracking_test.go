package tracking

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestJobOf(t *testing.T) {
	vcjob := metav1.OwnerReference{APIVersion: "batch.volcano.sh/v1alpha1", Kind: "Job", Name: "train", UID: "uid-1", Controller: ptr.To(true)}
	with := func(ref metav1.OwnerReference, change func(*metav1.OwnerReference)) metav1.OwnerReference {
		change(&ref)
		return ref
	}
	volcano := map[string]string{JobPodLabel: "train"}
	for name, tc := range map[string]struct {
		labels map[string]string
		refs   []metav1.OwnerReference
		want   bool
	}{
		// No label of ours: the job may have been admitted while the webhook was down.
		"Volcano's pod of a VcJob": {labels: volcano, refs: []metav1.OwnerReference{vcjob}, want: true},
		"the VcJob as controller among other owners": {labels: volcano, want: true, refs: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "uid-2"}, vcjob}},
		"another version of the VcJob API": {labels: volcano, want: true,
			refs: []metav1.OwnerReference{with(vcjob, func(r *metav1.OwnerReference) { r.APIVersion = "batch.volcano.sh/v1beta1" })}},
		"no Volcano label (a copy of a pod, or not Volcano's)": {labels: map[string]string{TrackedLabel: TrackedValue}, refs: []metav1.OwnerReference{vcjob}},
		"Volcano's label but no owner (copied labels)":         {labels: volcano},
		"a VcJob owns it without controlling it": {labels: volcano,
			refs: []metav1.OwnerReference{with(vcjob, func(r *metav1.OwnerReference) { r.Controller = nil })}},
		"a batch/v1 Job controls it": {labels: volcano,
			refs: []metav1.OwnerReference{with(vcjob, func(r *metav1.OwnerReference) { r.APIVersion = "batch/v1" })}},
		"another kind of batch.volcano.sh controls it": {labels: volcano,
			refs: []metav1.OwnerReference{with(vcjob, func(r *metav1.OwnerReference) { r.Kind = "Command" })}},
		"a malformed apiVersion": {labels: volcano,
			refs: []metav1.OwnerReference{with(vcjob, func(r *metav1.OwnerReference) { r.APIVersion = "batch.volcano.sh/v1/x" })}},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := JobOf(&metav1.ObjectMeta{Labels: tc.labels, OwnerReferences: tc.refs})
			if ok != tc.want {
				t.Fatalf("JobOf = %v, %v; want ok %v", got, ok, tc.want)
			}
			if ok {
				if diff := cmp.Diff(vcjob.UID, got.UID); diff != "" {
					t.Errorf("owner UID (-want +got):\n%s", diff)
				}
			}
		})
	}
}
