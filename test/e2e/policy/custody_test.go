package policy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// While the webhook is down, a tenant cannot claim a chain of custody its request does not have:
// an owner the job lacks, or a controller pod it is not. The owners the job has, written as the
// webhook writes them, pass; and through the webhook the stored value is what the policy computes
// (the webhook's Go and the policy's CEL encode owners alike).
func TestCustodyIsTheRequest(t *testing.T) {
	t.Parallel()
	env := policies(t)
	down := env.Namespace(t)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: down, Name: "flow"}}
	if err := env.Client.Create(t.Context(), owner); err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}
	for _, c := range []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{"an owner it lacks", map[string]string{tracking.SubmittedForAnnotation: "v1 ConfigMap ceo 1 controller"},
			"jobvault.io/submitted-for of VcJob " + down + "/forged must be what the request says"},
		{"a controller pod it is not", map[string]string{tracking.SubmitterExtras[1].Annotation: "jobflow-controller-0"},
			"jobvault.io/submitter-pod-name of VcJob " + down + "/forged must be what the request says"},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectDenied(t, as(t, tenant).Create(t.Context(), jobWith(down, "forged", c.annotations)), submitter, c.want)
		})
	}
	t.Run("the truth", func(t *testing.T) {
		j := jobWith(down, "owned", map[string]string{tracking.SubmittedForAnnotation: tracking.SubmittedFor([]metav1.OwnerReference{ref}),
			tracking.SubmitterExtras[1].Annotation: ""})
		j.OwnerReferences = []metav1.OwnerReference{ref}
		if err := as(t, tenant).Create(t.Context(), j); err != nil {
			t.Errorf("tenant creates a job with its true owners: %v", err)
		}
	})
	t.Run("through the webhook", func(t *testing.T) {
		up := webhookNamespace(t, env)
		upOwner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: up, Name: "flow"}}
		if err := env.Client.Create(t.Context(), upOwner); err != nil {
			t.Fatal(err)
		}
		upRef := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: upOwner.Name, UID: upOwner.UID, Controller: ptr.To(true)}
		j := jobWith(up, "owned", map[string]string{tracking.SubmittedForAnnotation: "v1 ConfigMap ceo 1 controller"})
		j.OwnerReferences = []metav1.OwnerReference{upRef}
		if err := as(t, tenant).Create(t.Context(), j); err != nil {
			t.Fatalf("create an owned job through the webhook: %v", err)
		}
		if got, want := get(t, j).Annotations[tracking.SubmittedForAnnotation], tracking.OwnerLine(upRef); got != want {
			t.Errorf("stored submitted-for %q, want %q", got, want)
		}
	})
}

// The backstop's mark makes a job's submitter unknown: only the archiver adds it after creation,
// and nobody changes or removes it (a tenant would otherwise have its self-stamped annotations
// taken for the webhook's).
func TestBackstopMarkGuarded(t *testing.T) {
	t.Parallel()
	env := policies(t)
	down := env.Namespace(t)
	j := jobWith(down, "backstopped", map[string]string{tracking.SubmitterAnnotation: "alice"})
	if err := as(t, tenant).Create(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	mark := setAnnotations(map[string]string{tracking.BackstoppedAtAnnotation: "2026-03-14T15:09:26Z"})
	expectDenied(t, patchAs(t, tenant, j, mark), submitter, "jobvault.io/backstopped-at of VcJob "+down+"/backstopped is added by the archiver only")
	if err := patchAs(t, archiver, j, mark); err != nil {
		t.Fatalf("the archiver marks a job it backstops: %v", err)
	}
	for _, c := range []struct {
		who    user
		change func(client.Object)
	}{
		{tenant, func(o client.Object) {
			a := o.GetAnnotations()
			delete(a, tracking.BackstoppedAtAnnotation)
			o.SetAnnotations(a)
		}},
		{operator, setAnnotations(map[string]string{tracking.BackstoppedAtAnnotation: "2026-03-14T15:10:00Z"})},
		{archiver, setAnnotations(map[string]string{tracking.BackstoppedAtAnnotation: "2026-03-14T15:10:00Z"})},
	} {
		t.Run(c.who.name, func(t *testing.T) {
			before := get(t, j.DeepCopy())
			expectDenied(t, patchAs(t, c.who, j, c.change), submitter, "never changed or removed (by "+c.who.name+" or anyone)")
			unchanged(t, env, before)
		})
	}
}
