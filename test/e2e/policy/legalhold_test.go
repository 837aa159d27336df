package policy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	legalHold = "jobvault-legal-hold"
	// The keys of pkg/tracking (LegalHoldAnnotation, RetentionAnnotation).
	holdKey      = "jobvault.io/legal-hold"
	retentionKey = "jobvault.io/retention"
)

// jobvault.io/legal-hold on a VcJob or a namespace, and jobvault.io/retention on a namespace, are
// set, changed and removed only by the operators named in the ConfigMap: not by the tenant, not by
// a cluster admin named nowhere, not by the archiver.
func TestLegalHoldOnlyByOperators(t *testing.T) {
	env := policies(t)
	ns := webhookNamespace(t, env)
	job, _ := runningJob(t, tenant, ns, "hold-me")
	hold := setAnnotations(map[string]string{holdKey: "case-1"})
	notOperator := "may be set, changed or removed only by the operators named in ConfigMap jobvault-system/jobvault-release-operators"

	expectDenied(t, patchAs(t, tenant, job, hold), legalHold, "VcJob "+ns+"/hold-me "+notOperator, "alice is not one of them")
	expectDenied(t, patchAs(t, archiver, job, hold), legalHold, notOperator)
	if err := patchAs(t, operator, job, hold); err != nil {
		t.Fatalf("operator holds the job: %v", err)
	}
	expectDenied(t, patchAs(t, tenant, job, func(o client.Object) {
		a := o.GetAnnotations()
		delete(a, holdKey)
		o.SetAnnotations(a)
	}), legalHold, "alice is not one of them")
	// Other annotations of a held job stay the tenant's.
	if err := patchAs(t, tenant, job, setAnnotations(map[string]string{"example.com/note": "x"})); err != nil {
		t.Errorf("tenant annotates her held job: %v", err)
	}

	space := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	for _, key := range []string{holdKey, retentionKey} {
		expectDenied(t, patchAs(t, clusterAd, space, setAnnotations(map[string]string{key: "24h"})), legalHold, "namespace "+ns+" "+notOperator, "rita is not one of them")
		if err := patchAs(t, opByGroup, space, setAnnotations(map[string]string{key: "24h"})); err != nil {
			t.Errorf("operator (by group) sets %s on the namespace: %v", key, err)
		}
	}
}
