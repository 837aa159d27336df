package policy

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/jobvault/jobvault/test/stack"
)

// config/policy applies without a warning, every policy type-checks against the schemas of pods
// and VcJobs without a warning, every binding denies, and each policy refuses its probe.
func TestPoliciesInForce(t *testing.T) {
	t.Parallel()
	policies(t)
	var bound []string
	for _, o := range stack.Kustomize(t, "policy") {
		if o.GetKind() != "ValidatingAdmissionPolicyBinding" {
			continue
		}
		actions, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "validationActions")
		if !slices.Equal(actions, []string{"Deny"}) {
			t.Errorf("binding %s: validationActions %q, want [Deny]", o.GetName(), actions)
		}
		bound = append(bound, o.GetName())
	}
	slices.Sort(bound)
	want := []string{"jobvault-archiver-markers", "jobvault-archiver-scope", "jobvault-legal-hold", "jobvault-pod-owner", "jobvault-release",
		"jobvault-release-operators-kept", "jobvault-release-templates", "jobvault-submitter"}
	if !slices.Equal(bound, want) {
		t.Errorf("bindings %q, want %q", bound, want)
	}
}
