package policy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	t.Parallel()
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
	// A retention the archiver could not use is refused, even from an operator, and the last one
	// stays.
	for _, bad := range []string{"90dayz", "0h", "-24h", "24"} {
		err := patchAs(t, opByGroup, space, setAnnotations(map[string]string{retentionKey: bad}))
		want := `jobvault.io/retention on namespace ` + ns + ` is "` + bad + `": want a positive Go duration, such as 2160h (90 days)`
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("retention %q: %v, want refused as invalid: %s", bad, err, want)
		}
	}
	if err := patchAs(t, opByGroup, space, setAnnotations(map[string]string{retentionKey: "2160h"})); err != nil {
		t.Errorf("operator sets a retention of 2160h: %v", err)
	}
	var got corev1.Namespace
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: ns}, &got); err != nil || got.Annotations[retentionKey] != "2160h" {
		t.Errorf("namespace retention %q (%v), want 2160h", got.Annotations[retentionKey], err)
	}
}
