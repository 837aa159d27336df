package admission

import (
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// Requests the API server never sends must get a 400 naming the problem, and no patch.
func TestBadRequestsAreDenied(t *testing.T) {
	job := func(raw string) cradmission.Request { return jobRequest([]byte(raw), "alice", "team-a") }
	jobs := newJobMutator(t, admissionTime)
	pods := NewPodMutator()
	cases := []struct {
		name    string
		handler cradmission.Handler
		req     cradmission.Request
		wantMsg string
	}{
		{"pod sent to the VcJob webhook", jobs, podRequest(pod().raw(t)), `admits only batch.volcano.sh/v1alpha1/jobs, got resource "v1/pods"`},
		{"VcJob sent to the pod webhook", pods, jobRequest(vcjob().raw(t), "alice"), `admits only v1/pods, got resource "batch.volcano.sh/v1alpha1/jobs"`},
		{"empty request", jobs, cradmission.Request{}, `got resource "none"`},
		{"resource right, kind wrong", jobs, func() cradmission.Request {
			r := jobRequest(vcjob().raw(t), "alice")
			r.Kind = metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
			return r
		}(), `admits only kind batch.volcano.sh/v1alpha1 Job, got kind "batch/v1 Job"`},
		{"no object", jobs, job(``), "request.object is empty"},
		{"null object", jobs, job(`null`), "request.object is null"},
		{"truncated object", jobs, job(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{`), "decode request.object as batch.volcano.sh/v1alpha1 Job"},
		{"array object", jobs, job(`[]`), "decode request.object"},
		{"object of another kind", jobs, job(`{"apiVersion":"v1","kind":"Pod","metadata":{}}`), `request.object is apiVersion "v1" kind "Pod", want batch.volcano.sh/v1alpha1 Job`},
		{"object without kind", jobs, job(`{"metadata":{}}`), `request.object is apiVersion "" kind ""`},
		{"metadata not an object", jobs, job(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":"x"}`), "metadata is a string, want an object"},
		{"finalizers not an array", jobs, job(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"finalizers":{}}}`), "metadata.finalizers is an object"},
		{"finalizer not a string", jobs, job(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"finalizers":["a",1]}}`), "metadata.finalizers[1] is a number"},
		{"label value not a string", jobs, job(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"labels":{"a":true}}}`), `metadata.labels["a"] is a boolean`},
		{"annotations not an object", jobs, job(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"annotations":[]}}`), "metadata.annotations is an array"},
		{"no username", jobs, jobRequest(vcjob().raw(t), ""), "request.userInfo.username is empty"},
		{"pod labels not an object", pods, podRequest([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"labels":1}}`)), "metadata.labels is a number"},
		{"pod owner references not an array", pods, podRequest([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"labels":{"` + tracking.JobPodLabel + `":"train"},"ownerReferences":{}}}`)), "decode metadata.ownerReferences"},
		{"pod owner reference controller not a boolean", pods, podRequest([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"ownerReferences":[{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","name":"train","uid":"1","controller":"yes"}]}}`)), "decode metadata.ownerReferences"},
		{"pod finalizers not an array", pods, podRequest([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"labels":{"` + tracking.JobPodLabel + `":"train"},"ownerReferences":[{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","name":"train","uid":"1","controller":true}],"finalizers":"x"}}`)), "metadata.finalizers is a string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.handler.Handle(t.Context(), tc.req)
			if resp.Allowed {
				t.Fatalf("allowed with patches %v, want a denial", resp.Patches)
			}
			if len(resp.Patches) != 0 || len(resp.Patch) != 0 {
				t.Errorf("denial carries a patch: %v", resp.Patches)
			}
			if resp.Result == nil || resp.Result.Code != http.StatusBadRequest || resp.Result.Reason != metav1.StatusReasonBadRequest {
				t.Fatalf("result = %+v, want code 400 reason BadRequest", resp.Result)
			}
			if !strings.Contains(resp.Result.Message, tc.wantMsg) {
				t.Errorf("message = %q, want it to contain %q", resp.Result.Message, tc.wantMsg)
			}
		})
	}
}

// Operations the configuration does not send are allowed as they are.
func TestNonCreatePassesUnchanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*cradmission.Request)
	}{
		{"update", func(r *cradmission.Request) { r.Operation = admissionv1.Update }},
		{"delete", func(r *cradmission.Request) { r.Operation = admissionv1.Delete; r.Object.Raw = nil }},
		{"status subresource", func(r *cradmission.Request) { r.SubResource = "status" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := jobRequest(vcjob().raw(t), "alice")
			tc.mutate(&req)
			resp := newJobMutator(t, admissionTime).Handle(t.Context(), req)
			if !resp.Allowed || len(resp.Patches) != 0 {
				t.Errorf("allowed=%v patches=%v result=%v, want allowed unchanged", resp.Allowed, resp.Patches, resp.Result)
			}
		})
	}
}
