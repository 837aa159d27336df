package policy

import (
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
)

const scope = "jobvault-archiver-scope"

func podOf(f func(*corev1.Pod)) func(client.Object) {
	return func(o client.Object) { f(o.(*corev1.Pod)) }
}

func jobOf(f func(*batchv1alpha1.Job)) func(client.Object) {
	return func(o client.Object) { f(o.(*batchv1alpha1.Job)) }
}

// The archiver's RBAC lets it patch any pod and VcJob; the policy lets it change only jobvault.io/
// finalizers, labels and annotations. An image change on a pod, as the archiver's identity, is
// refused, as is every other change beyond those, alone or next to an allowed one; the archiver's
// own writes (release, finalize, backstop) pass; other users are not concerned.
func TestArchiverScope(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ns := webhookNamespace(t, env)
	job, pod := runningJob(t, tenant, ns, "scoped")
	if err := patchAs(t, tenant, pod, func(o client.Object) { controllerutil.AddFinalizer(o, "example.com/keep") }); err != nil {
		t.Fatal(err)
	}

	// RBAC (config/archiver's ClusterRole, nothing more) lets the archiver patch the pod: only the
	// policy stands between it and an image change.
	may := func(verb string) bool {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: archiver.name,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "pods", Namespace: ns, Name: pod.Name}}}
		if err := env.Client.Create(t.Context(), sar); err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	if !may("patch") || may("update") {
		t.Fatalf("RBAC: the archiver may patch %v, update %v pod %s; want its ClusterRole's: patch only", may("patch"), may("update"), pod.Name)
	}

	also := "this update of pod " + ns + "/" + pod.Name + " also changes "
	for _, c := range []struct {
		name   string
		obj    client.Object
		change func(client.Object)
		want   string
	}{
		{"image of the pod", pod, podOf(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.example.com/miner:latest" }), also + "spec"},
		{"image and our finalizer", pod, podOf(func(p *corev1.Pod) {
			controllerutil.RemoveFinalizer(p, tracking.PodFinalizer)
			p.Spec.Containers[0].Image = "registry.example.com/miner:latest"
		}), also + "spec"},
		{"label of the pod", pod, podOf(func(p *corev1.Pod) { p.Labels["app"] = "other" }), also + "label app"},
		{"owner of the pod", pod, podOf(func(p *corev1.Pod) { p.OwnerReferences = nil }), also + "metadata.ownerReferences"},
		{"another finalizer of the pod", pod, func(o client.Object) { controllerutil.RemoveFinalizer(o, "example.com/keep") },
			also + "finalizers not of jobvault.io/"},
		{"annotation of the job", job, setAnnotations(map[string]string{"example.com/note": "x"}),
			"this update of VcJob " + ns + "/scoped also changes annotation example.com/note"},
		{"spec of the job", job, jobOf(func(j *batchv1alpha1.Job) { j.Spec.MaxRetry = 7 }), "VcJob " + ns + "/scoped also changes spec"},
		{"another label of a job's template", job, jobOf(func(j *batchv1alpha1.Job) { j.Spec.Tasks[0].Template.Labels = map[string]string{"app": "x"} }), "also changes spec"},
		// What the backstop once did: Volcano's webhook would refuse it on a running job, the
		// policy on any job.
		{"our label added to a job's template", job, jobOf(func(j *batchv1alpha1.Job) {
			j.Spec.Tasks[0].Template.Labels = map[string]string{tracking.TrackedLabel: tracking.TrackedValue}
		}), "also changes spec"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := get(t, c.obj.DeepCopyObject().(client.Object))
			err := patchAs(t, archiver, c.obj, c.change)
			if c.name == "owner of the pod" && deniedBy(err, podOwner) {
				// Policy jobvault-pod-owner refuses it too, and the API server names whichever
				// policy refused first.
				expectDenied(t, err, podOwner, "may not be added, changed or removed after creation")
			} else {
				expectDenied(t, err, scope, c.want)
			}
			unchanged(t, env, before)
		})
	}

	t.Run("its own writes", func(t *testing.T) {
		if err := patchAs(t, archiver, pod, func(o client.Object) {
			controllerutil.RemoveFinalizer(o, tracking.PodFinalizer)
			setAnnotations(map[string]string{tracking.ReleaseAnnotation: "copied from the job"})(o)
		}); err != nil {
			t.Errorf("archiver releases the pod: %v", err)
		}
		if err := patchAs(t, archiver, job, func(o client.Object) {
			controllerutil.RemoveFinalizer(o, tracking.JobFinalizer)
			setAnnotations(archiveResults)(o)
		}); err != nil {
			t.Errorf("archiver finalizes the job: %v", err)
		}
	})
	t.Run("the backstop", func(t *testing.T) {
		// Admitted while the webhook was down: no finalizer, no label.
		down := env.Namespace(t)
		j := jobWith(down, "unstamped", nil)
		if err := as(t, tenant).Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
		if err := patchAs(t, archiver, j, func(o client.Object) {
			controllerutil.AddFinalizer(o, tracking.JobFinalizer)
			setLabel(tracking.TrackedLabel, tracking.TrackedValue)(o)
		}); err != nil {
			t.Errorf("archiver adds the finalizer and label: %v", err)
		}
	})
	t.Run("other users", func(t *testing.T) {
		if err := patchAs(t, tenant, pod, podOf(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "busybox:stable" })); err != nil {
			t.Errorf("tenant changes her pod's image: %v", err)
		}
	})
}
