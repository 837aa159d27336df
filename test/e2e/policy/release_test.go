package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
)

const (
	release          = "jobvault-release"
	releaseTemplates = "jobvault-release-templates"
	operatorsKept    = "jobvault-release-operators-kept"
)

func setRelease(v string) func(client.Object) {
	return setAnnotations(map[string]string{tracking.ReleaseAnnotation: v})
}

func dropRelease(o client.Object) {
	a := o.GetAnnotations()
	delete(a, tracking.ReleaseAnnotation)
	o.SetAnnotations(a)
}

// jobvault.io/release is set, changed and removed on VcJobs and pods only by the operators named
// in the ConfigMap (by user or by group) and by the archiver; not by the tenant, not by a cluster
// admin named nowhere, not through pods/status. Updates that leave it alone are not concerned.
func TestReleaseOnlyByOperators(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ns := webhookNamespace(t, env)
	job, pod := runningJob(t, tenant, ns, "release-me")
	notOperator := "may be set, changed or removed only by the operators named in ConfigMap jobvault-system/jobvault-release-operators"

	for _, c := range []struct {
		name string
		who  user
		obj  client.Object
		want string
	}{
		{"tenant releases her job", tenant, job, "jobvault.io/release on VcJob " + ns + "/release-me " + notOperator + " (and by the archiver); alice is not one of them"},
		{"tenant releases her pod", tenant, pod, "jobvault.io/release on pod " + ns + "/" + pod.Name},
		{"cluster admin releases the job", clusterAd, job, "rita is not one of them"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := get(t, c.obj.DeepCopyObject().(client.Object))
			expectDenied(t, patchAs(t, c.who, c.obj, setRelease("opt-out")), release, c.want)
			unchanged(t, env, before)
		})
	}
	t.Run("tenant releases through pods/status", func(t *testing.T) {
		before := get(t, pod.DeepCopy())
		expectDenied(t, statusPatchAs(t, tenant, pod, setRelease("opt-out")), markers,
			"jobvault.io/release cannot be set, changed or removed through the status of pod "+ns+"/"+pod.Name)
		unchanged(t, env, before)
	})
	t.Run("tenant creates a released job", func(t *testing.T) {
		j := jobWith(ns, "pre-released", map[string]string{tracking.ReleaseAnnotation: "opt-out"})
		expectDenied(t, as(t, tenant).Create(t.Context(), j), release, "VcJob "+ns+"/pre-released "+notOperator)
	})

	t.Run("operator named as user", func(t *testing.T) {
		if err := patchAs(t, operator, pod, setRelease("ticket-1")); err != nil {
			t.Fatalf("operator releases the pod: %v", err)
		}
		if err := patchAs(t, operator, pod, setRelease("ticket-2")); err != nil {
			t.Errorf("operator changes the release: %v", err)
		}
		before := get(t, pod.DeepCopy())
		expectDenied(t, patchAs(t, tenant, pod, dropRelease), release, "alice is not one of them")
		unchanged(t, env, before)
	})
	t.Run("operator named through a group", func(t *testing.T) {
		if err := patchAs(t, opByGroup, pod, dropRelease); err != nil {
			t.Errorf("operator removes the release: %v", err)
		}
		if err := patchAs(t, opByGroup, job, setRelease("ticket-3")); err != nil {
			t.Errorf("operator releases the job: %v", err)
		}
		if err := as(t, opByGroup).Create(t.Context(), jobWith(ns, "born-released", map[string]string{tracking.ReleaseAnnotation: "ticket-4"})); err != nil {
			t.Errorf("operator creates a released job: %v", err)
		}
	})
	t.Run("archiver copies a job's release to its pod", func(t *testing.T) {
		if err := patchAs(t, archiver, pod, setRelease("ticket-3")); err != nil {
			t.Errorf("archiver releases the pod: %v", err)
		}
	})
	t.Run("other updates are not concerned", func(t *testing.T) {
		if err := patchAs(t, tenant, pod, setLabel("team", "a")); err != nil {
			t.Errorf("tenant labels her released pod: %v", err)
		}
	})
}

// Nobody, operators included, puts jobvault.io/release in a VcJob's pod templates: every pod would
// be created released.
func TestReleaseNotInTemplates(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ns := webhookNamespace(t, env)
	for _, u := range []user{tenant, operator} {
		t.Run(u.name+" creates", func(t *testing.T) {
			j := jobWith(ns, "template-released", nil)
			j.Spec.Tasks[0].Template.Annotations[tracking.ReleaseAnnotation] = "opt-out"
			expectDenied(t, as(t, u).Create(t.Context(), j), releaseTemplates,
				"jobvault.io/release is not allowed in the pod template of task(s) main of VcJob "+ns+"/template-released")
		})
	}
	t.Run("tenant updates", func(t *testing.T) {
		job, _ := runningJob(t, tenant, ns, "later")
		before := get(t, job.DeepCopy())
		expectDenied(t, patchAs(t, tenant, job, func(o client.Object) {
			tasks := o.(*batchv1alpha1.Job).Spec.Tasks
			tasks[0].Template.Annotations[tracking.ReleaseAnnotation] = "opt-out"
		}), releaseTemplates, "task(s) main of VcJob "+ns+"/later")
		unchanged(t, env, before)
	})
}

// The operators ConfigMap cannot be deleted while jobvault-release is bound: the API server looks
// a binding's parameters up before its matchConditions, so with parameterNotFoundAction: Deny a
// missing ConfigMap would refuse every pod and VcJob write, not only those touching
// jobvault.io/release. The second part shows that behaviour of the API server on a policy of its
// own, which matchConditions exclude everything from.
func TestReleaseOperatorsKept(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: deployNamespace, Name: operatorsConfigMap}}
	for _, u := range []user{clusterAd, operator} {
		expectDenied(t, as(t, u).Delete(ctx, cm, client.DryRunAll), operatorsKept,
			"ConfigMap jobvault-system/jobvault-release-operators holds the parameters", "delete ValidatingAdmissionPolicyBinding jobvault-release first")
	}
	// A deletecollection's items reach admission without a request name.
	expectDenied(t, as(t, clusterAd).DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(deployNamespace), client.DryRunAll), operatorsKept)
	if err := patchAs(t, operator, cm, func(o client.Object) { o.(*corev1.ConfigMap).Data["users"] += "\nanother-operator" }); err != nil {
		t.Errorf("edit the operators: %v", err)
	}

	t.Run("why", func(t *testing.T) {
		ns := env.Namespace(t)
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-missing-params-" + ns},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
				MatchConstraints: &admissionregistrationv1.MatchResources{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
					ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					}}},
				},
				MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "never", Expression: "false"}},
				Validations:     []admissionregistrationv1.Validation{{Expression: "false", Message: "never evaluated"}},
			},
		}
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        policy.Name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
				ParamRef: &admissionregistrationv1.ParamRef{Name: "missing", Namespace: ns,
					ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
			},
		}
		for _, o := range []client.Object{policy, binding} {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
		}
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			err = env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "unrelated-"}}, client.DryRunAll)
			if err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), "no params found") {
			t.Errorf("a ConfigMap that the policy's matchConditions exclude: %v; want it refused for the missing parameters", err)
		}
	})
}
