package admission

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// newTestServer serves both mutators over plain HTTP through the same mux, registration and
// controller-runtime admission.Webhook the binary uses; only TLS is left out.
func newTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := webhook.NewServer(webhook.Options{})
	if err := Register(srv, clocktesting.NewFakePassiveClock(admissionTime)); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.WebhookMux())
	t.Cleanup(ts.Close)
	return ts
}

func review(t *testing.T, req admissionv1.AdmissionRequest) []byte {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func post(t *testing.T, url, contentType string, body []byte) (int, admissionv1.AdmissionReview) {
	t.Helper()
	resp, err := http.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v\n%s", err, raw)
	}
	if out.Response == nil {
		t.Fatalf("AdmissionReview without response: %s", raw)
	}
	return resp.StatusCode, out
}

func TestHTTPMutatesVcJob(t *testing.T) {
	ts := newTestServer(t)
	raw := vcjob().generateName("train-").task("worker", nil).raw(t)
	req := jobRequest(raw, "alice", "team-a").AdmissionRequest
	_, out := post(t, ts.URL+JobPath, "application/json", review(t, req))
	if out.Response.UID != req.UID || !out.Response.Allowed {
		t.Fatalf("response = %+v, want allowed with uid %s", out.Response, req.UID)
	}
	if out.Response.PatchType == nil || *out.Response.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patchType = %v, want JSONPatch", out.Response.PatchType)
	}
	patch, err := jsonpatch.DecodePatch(out.Response.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatal(err)
	}
	got := decodeMap(t, patched)
	meta := got["metadata"].(map[string]any)
	if meta["annotations"].(map[string]any)[tracking.SubmitterAnnotation] != "alice" {
		t.Errorf("metadata after patch = %v, want submitter alice", meta)
	}
}

func TestHTTPMutatesVcJobPod(t *testing.T) {
	ts := newTestServer(t)
	raw := vcjobPod().raw(t)
	_, out := post(t, ts.URL+PodPath, "application/json", review(t, podRequest(raw).AdmissionRequest))
	if !out.Response.Allowed || !strings.Contains(string(out.Response.Patch), tracking.PodFinalizer) {
		t.Fatalf("response = %+v %s, want the pod finalizer added", out.Response, out.Response.Patch)
	}
}

// Malformed requests get an AdmissionReview whose response is a 400 with the reason (the
// admission protocol answers in the body, with HTTP 200), never a panic or a patch.
func TestHTTPBadRequests(t *testing.T) {
	ts := newTestServer(t)
	good := review(t, jobRequest(vcjob().raw(t), "alice").AdmissionRequest)
	cases := []struct {
		name        string
		path        string
		contentType string
		body        []byte
		wantMsg     string
	}{
		{"empty body", JobPath, "application/json", nil, "request body is empty"},
		{"not JSON", JobPath, "application/json", []byte("hello"), "couldn't get version/kind"},
		{"truncated review", JobPath, "application/json", good[:len(good)/2], "unexpected"},
		{"wrong content type", JobPath, "text/plain", good, "contentType=text/plain, expected application/json"},
		{"review without request", JobPath, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), `got resource "none"`},
		{"pod review on the VcJob path", JobPath, "application/json", review(t, podRequest(pod().raw(t)).AdmissionRequest), "admits only batch.volcano.sh/v1alpha1/jobs"},
		{"VcJob review on the pod path", PodPath, "application/json", good, "admits only v1/pods"},
		{"object is a string", JobPath, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"batch.volcano.sh","version":"v1alpha1","kind":"Job"},"resource":{"group":"batch.volcano.sh","version":"v1alpha1","resource":"jobs"},"operation":"CREATE","userInfo":{"username":"alice"},"object":"job"}}`), "decode request.object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, out := post(t, ts.URL+tc.path, tc.contentType, tc.body)
			if status != http.StatusOK {
				t.Errorf("HTTP status %d, want 200 with the error in the AdmissionReview", status)
			}
			r := out.Response
			if r.Allowed || len(r.Patch) != 0 {
				t.Errorf("allowed=%v patch=%s, want a denial without patch", r.Allowed, r.Patch)
			}
			if r.Result == nil || r.Result.Code != http.StatusBadRequest {
				t.Fatalf("result = %+v, want code 400", r.Result)
			}
			if !strings.Contains(r.Result.Message, tc.wantMsg) {
				t.Errorf("message = %q, want it to contain %q", r.Result.Message, tc.wantMsg)
			}
		})
	}
}

func TestHTTPGetIsBadRequest(t *testing.T) {
	ts := newTestServer(t)
	resp, err := http.Get(ts.URL + JobPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Response == nil || out.Response.Result.Code != http.StatusBadRequest {
		t.Fatalf("response = %+v, want code 400", out.Response)
	}
}
