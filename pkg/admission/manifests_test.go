package admission

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// render runs kubectl kustomize on a config directory and returns its objects.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not on PATH")
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, exitErr.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode output of kubectl kustomize %s: %v", dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind {
			return u
		}
	}
	t.Fatalf("no %s rendered", kind)
	return nil
}

func webhookConfig(t *testing.T, objs []*unstructured.Unstructured) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(find(t, objs, "MutatingWebhookConfiguration").Object, &mwc, true); err != nil {
		t.Fatalf("MutatingWebhookConfiguration does not decode strictly: %v", err)
	}
	return &mwc
}

// TestManifests renders every config directory this package owns and checks the webhook
// configuration against the code: paths, the tracking label, and the safety settings.
func TestManifests(t *testing.T) {
	base := render(t, "../../config/webhook")
	mwc := webhookConfig(t, base)
	if len(mwc.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want 2", len(mwc.Webhooks))
	}
	excluded := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", "jobvault-system"},
	}}}
	wantPaths := map[string]string{"vcjobs.jobvault.io": JobPath, "pods.jobvault.io": PodPath}
	wantRules := map[string]admissionregistrationv1.Rule{
		"vcjobs.jobvault.io": {APIGroups: []string{jobTarget.resource.Group}, APIVersions: []string{jobTarget.resource.Version}, Resources: []string{jobTarget.resource.Resource}},
		"pods.jobvault.io":   {APIGroups: []string{podTarget.resource.Group}, APIVersions: []string{podTarget.resource.Version}, Resources: []string{podTarget.resource.Resource}},
	}
	for _, wh := range mwc.Webhooks {
		t.Run(wh.Name, func(t *testing.T) {
			svc := wh.ClientConfig.Service
			if svc == nil || svc.Path == nil || *svc.Path != wantPaths[wh.Name] || svc.Name != "jobvault-webhook" || svc.Namespace != "jobvault-system" {
				t.Errorf("clientConfig.service = %+v, want jobvault-system/jobvault-webhook path %s", svc, wantPaths[wh.Name])
			}
			if len(wh.Rules) != 1 || !slices.Equal(wh.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
				t.Fatalf("rules = %+v, want one CREATE rule", wh.Rules)
			}
			if diff := cmp.Diff(wantRules[wh.Name], wh.Rules[0].Rule, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Scope" }, cmp.Ignore())); diff != "" {
				t.Errorf("rule (-want +got):\n%s", diff)
			}
			if wh.SideEffects == nil || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone {
				t.Errorf("sideEffects = %v, want None", wh.SideEffects)
			}
			if !slices.Equal(wh.AdmissionReviewVersions, []string{"v1"}) {
				t.Errorf("admissionReviewVersions = %v, want [v1]", wh.AdmissionReviewVersions)
			}
			if wh.TimeoutSeconds == nil || *wh.TimeoutSeconds > 5 {
				t.Errorf("timeoutSeconds = %v, want at most 5", wh.TimeoutSeconds)
			}
			if wh.ReinvocationPolicy == nil || *wh.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
				t.Errorf("reinvocationPolicy = %v, want IfNeeded", wh.ReinvocationPolicy)
			}
			if wh.MatchPolicy == nil || *wh.MatchPolicy != admissionregistrationv1.Equivalent {
				t.Errorf("matchPolicy = %v, want Equivalent", wh.MatchPolicy)
			}
			if diff := cmp.Diff(excluded, wh.NamespaceSelector); diff != "" {
				t.Errorf("namespaceSelector (-want +got):\n%s", diff)
			}
		})
	}
	jobs, pods := mwc.Webhooks[0], mwc.Webhooks[1]
	if *jobs.FailurePolicy != admissionregistrationv1.Ignore || *pods.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy vcjobs=%s pods=%s, want Ignore and Fail", *jobs.FailurePolicy, *pods.FailurePolicy)
	}
	if jobs.ObjectSelector != nil && (len(jobs.ObjectSelector.MatchLabels) > 0 || len(jobs.ObjectSelector.MatchExpressions) > 0) {
		t.Errorf("vcjobs objectSelector = %+v, want none: every VcJob is tracked", jobs.ObjectSelector)
	}
	if diff := cmp.Diff(tracking.JobPodSelector(), pods.ObjectSelector); diff != "" {
		t.Errorf("pods objectSelector (-want +got):\n%s", diff)
	}

	var deploy appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(find(t, base, "Deployment").Object, &deploy, true); err != nil {
		t.Fatalf("Deployment does not decode strictly: %v", err)
	}
	if r := deploy.Spec.Replicas; r == nil || *r < 2 {
		t.Errorf("Deployment replicas = %v, want at least 2", r)
	}
	pod := deploy.Spec.Template.Spec
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext = %+v, want runAsNonRoot and seccomp RuntimeDefault", sc)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s securityContext = %+v, want read-only root, no privilege escalation, drop ALL", c.Name, sc)
		}
		if c.ReadinessProbe == nil || c.LivenessProbe == nil || c.Resources.Requests == nil {
			t.Errorf("container %s lacks probes or resource requests", c.Name)
		}
	}
	find(t, base, "PodDisruptionBudget")
	find(t, base, "Service")
	find(t, base, "ServiceAccount")

	t.Run("certmanager", func(t *testing.T) {
		objs := render(t, "../../config/certmanager")
		if got := webhookConfig(t, objs).Annotations["cert-manager.io/inject-ca-from"]; got != "jobvault-system/jobvault-webhook-serving" {
			t.Errorf("inject-ca-from = %q", got)
		}
		var serving *unstructured.Unstructured
		for _, u := range objs {
			if u.GetKind() == "Certificate" && u.GetName() == "jobvault-webhook-serving" {
				serving = u
			}
		}
		if serving == nil {
			t.Fatal("no serving Certificate")
		}
		if secret, _, _ := unstructured.NestedString(serving.Object, "spec", "secretName"); secret != "jobvault-webhook-tls" {
			t.Errorf("serving Certificate writes Secret %q, want the one the Deployment mounts", secret)
		}
	})
	t.Run("selfsigned", func(t *testing.T) {
		objs := render(t, "../../config/selfsigned")
		for _, u := range objs {
			if u.GetKind() == "ConfigMap" {
				t.Errorf("the caBundle carrier ConfigMap %s is rendered; it must stay local", u.GetName())
			}
		}
		webhooks, _, _ := unstructured.NestedSlice(find(t, objs, "MutatingWebhookConfiguration").Object, "webhooks")
		for _, wh := range webhooks {
			if _, found, _ := unstructured.NestedFieldNoCopy(wh.(map[string]any), "clientConfig", "caBundle"); !found {
				t.Errorf("webhook %v has no caBundle field to inject into", wh.(map[string]any)["name"])
			}
		}
	})
}
