package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/jobvault/jobvault/pkg/tracking"
)

var (
	fuzzJobPath = regexp.MustCompile(`^/metadata(/|$)`)
	fuzzPodPath = regexp.MustCompile(`^/metadata/`)
)

// FuzzAdmission feeds arbitrary bytes to the decode-and-mutate path twice: as a whole HTTP body
// through controller-runtime's admission.Webhook, and as the object of a well-formed request.
// Whatever the input: no panic; a denial is a 400 without patch; an allowed patch only adds or
// replaces metadata, applies cleanly, leaves every other field as it was and is a fixed point (a
// second pass changes nothing).
func FuzzAdmission(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"generateName":"x-"},"spec":{"tasks":[{"template":{}}]}}`), "alice", false)
	f.Add([]byte(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"labels":null,"finalizers":["a"]},"spec":{"tasks":[{"template":null},{"template":{"metadata":{"labels":{"a":"b"}}}}],"x":1e308}}`), "system:serviceaccount:ns:sa", false)
	f.Add([]byte(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":null,"spec":null}`), "bob", false)
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"labels":{"`+tracking.JobPodLabel+`":"train"},"ownerReferences":[{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","name":"train","uid":"1","controller":true}],"finalizers":null}}`), "", true)
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{}}`), "", true)
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"labels":{"`+tracking.JobPodLabel+`":"train"},"ownerReferences":[{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","name":"train","uid":"1","controller":true}]}}}}`), "", true)
	f.Add([]byte(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"annotations":{"`+tracking.AdmittedAtAnnotation+`":"2026-03-14T15:09:00Z"}}}`), "eve", false)
	f.Add([]byte(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job",`), "alice", false)
	f.Add([]byte(`[1,2`), "alice", false)

	jobs := newJobMutator(f, admissionTime)
	pods := NewPodMutator()
	webhooks := map[bool]http.Handler{
		false: &cradmission.Webhook{Handler: jobs},
		true:  &cradmission.Webhook{Handler: pods},
	}

	f.Fuzz(func(t *testing.T, data []byte, user string, isPod bool) {
		// The bytes as a whole request body.
		rec := httptest.NewRecorder()
		webhooks[isPod].ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(data)).WithContext(t.Context()))
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("ServeHTTP answered %q (%v), want an AdmissionReview with a response", rec.Body.String(), err)
		}
		checkResponse(t, cradmission.Response{AdmissionResponse: *out.Response}, nil)

		// The bytes as the object of a CREATE.
		var handler cradmission.Handler = jobs
		req := jobRequest(data, user, "group-a", user)
		allowedPath := fuzzJobPath
		if isPod {
			handler, req, allowedPath = pods, podRequest(data), fuzzPodPath
		}
		resp := handler.Handle(t.Context(), req)
		checkResponse(t, resp, allowedPath)
		if !resp.Allowed {
			return
		}
		patched := applyPatch(t, data, resp)
		if diff := cmp.Diff(withoutMetadata(decodeMap(t, data)), withoutMetadata(decodeMap(t, patched))); diff != "" {
			t.Fatalf("patch changed more than metadata (-want +got):\n%s", diff)
		}
		req.Object.Raw = patched
		again := handler.Handle(t.Context(), req)
		if !again.Allowed || len(again.Patches) != 0 {
			t.Fatalf("second pass: allowed=%v patches=%v result=%v, want allowed and unchanged", again.Allowed, again.Patches, again.Result)
		}
	})
}

// checkResponse asserts a denial is a 400 with a message and no patch, and, if allowedPath is
// set, that an allowed patch only adds or replaces (never removes) at allowed paths.
func checkResponse(t *testing.T, resp cradmission.Response, allowedPath *regexp.Regexp) {
	t.Helper()
	if !resp.Allowed {
		if resp.Result == nil || resp.Result.Code != http.StatusBadRequest || resp.Result.Message == "" {
			t.Fatalf("denial result = %+v, want code 400 with a message", resp.Result)
		}
		if len(resp.Patches) != 0 || len(resp.Patch) != 0 {
			t.Fatalf("denial carries a patch")
		}
		return
	}
	if allowedPath == nil {
		return
	}
	for _, op := range resp.Patches {
		if (op.Operation != "add" && op.Operation != "replace") || !allowedPath.MatchString(op.Path) {
			t.Fatalf("patch operation %s %s outside metadata", op.Operation, op.Path)
		}
	}
}
