package policy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
)

const podOwner = "jobvault-pod-owner"

// A tenant with edit in its namespace cannot take a tracked pod out of the archiver's view: not by
// removing or changing volcano.sh/job-name (on the pod or through its status), not by changing or
// removing its owner references. Nor can it point a pod at a VcJob by a name that is no VcJob name
// ("../victim-ns/victim-job"), or give a running pod a VcJob owner afterwards.
func TestTenantCannotDetachOrForgeTrackedPods(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ns := webhookNamespace(t, env)
	job, pod := runningJob(t, tenant, ns, "kept")
	if !hasFinalizer(pod, tracking.PodFinalizer) {
		t.Fatalf("pod finalizers %v: the webhook did not add ours", pod.Finalizers)
	}
	mallory := stack.TenantClient(t, env, ns, "mallory")
	patch := func(obj client.Object, change func(client.Object)) error {
		return patchWith(t, obj, change, func(cur client.Object, p client.Patch) error { return mallory.Patch(t.Context(), cur, p) })
	}
	setLabel := func(v *string) func(client.Object) {
		return func(o client.Object) {
			l := o.GetLabels()
			if v == nil {
				delete(l, tracking.JobPodLabel)
			} else {
				l[tracking.JobPodLabel] = *v
			}
			o.SetLabels(l)
		}
	}
	for _, c := range []struct {
		name string
		do   func() error
		want string
	}{
		{"remove the job label", func() error { return patch(pod, setLabel(nil)) }, "volcano.sh/job-name of pod " + ns + "/" + pod.Name},
		{"change the job label", func() error { return patch(pod, setLabel(ptr.To("other"))) }, "may not be removed or changed (mallory tried)"},
		// edit does not grant pods/status: the cluster admin alice tries it.
		{"remove the job label through the status", func() error { return statusPatchAs(t, tenant, pod, setLabel(nil)) }, "volcano.sh/job-name"},
		{"remove the owner references", func() error {
			return patch(pod, func(o client.Object) { o.SetOwnerReferences(nil) })
		}, "the VcJob controller reference of pod " + ns + "/" + pod.Name + " may not be added, changed or removed"},
		{"point the owner at another job", func() error {
			return patch(pod, func(o client.Object) {
				refs := o.GetOwnerReferences()
				refs[0].Name, refs[0].UID = "other", "00000000-0000-0000-0000-000000000000"
				o.SetOwnerReferences(refs)
			})
		}, "may not be added, changed or removed"},
		{"add another owner", func() error {
			return patch(pod, func(o client.Object) {
				o.SetOwnerReferences(append(o.GetOwnerReferences(), metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "1"}))
			})
		}, "the ownerReferences of pod " + ns + "/" + pod.Name + ", a pod jobvault archives, may not change"},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectDenied(t, c.do(), podOwner, c.want)
			unchanged(t, env, pod)
		})
	}

	t.Run("create a pod owned by a VcJob name that climbs out", func(t *testing.T) {
		p := plainPod(ns, "forged")
		p.Labels = map[string]string{tracking.JobPodLabel: job.Name}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: batchv1alpha1.SchemeGroupVersion.String(), Kind: "Job",
			Name: "../victim-ns/victim-job", UID: job.UID, Controller: ptr.To(true)}}
		expectDenied(t, mallory.Create(t.Context(), p), podOwner, `"../victim-ns/victim-job"`, "no VcJob name")
	})
	t.Run("give a running pod a VcJob owner", func(t *testing.T) {
		p := plainPod(ns, "adopted")
		if err := mallory.Create(t.Context(), p); err != nil {
			t.Fatalf("create a plain pod as the tenant: %v", err)
		}
		err := patch(p, func(o client.Object) {
			o.SetLabels(map[string]string{tracking.JobPodLabel: job.Name})
			o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: batchv1alpha1.SchemeGroupVersion.String(), Kind: "Job",
				Name: job.Name, UID: job.UID, Controller: ptr.To(true)}})
			o.SetFinalizers(append(o.GetFinalizers(), tracking.PodFinalizer))
		})
		expectDenied(t, err, podOwner, "may not be added, changed or removed after creation (mallory tried)")
		unchanged(t, env, p)
	})
	// What the policy leaves alone: the tenant's own labels on the tracked pod.
	t.Run("other labels stay the tenant's", func(t *testing.T) {
		if err := patch(pod, func(o client.Object) {
			l := o.GetLabels()
			l["team"] = "a"
			o.SetLabels(l)
		}); err != nil {
			t.Errorf("tenant's own label refused: %v", err)
		}
	})
}

// plainPod is a pod of no job that the scheduler never places (it has none to run on).
func plainPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{SchedulerName: "none", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
}
