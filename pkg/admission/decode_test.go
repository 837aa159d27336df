package admission

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// jobHead is a VcJob's apiVersion and kind, members of every hostile object below.
const jobHead = `"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job"`

// Objects the API server never sends, or sends rarely, decoded as the object of a CREATE: each
// gets the verdict it would get from decoding the whole object with encoding/json, or, where that
// would be ambiguous (a member twice), a 400 naming the problem. Reading the object stops short of
// building anything but apiVersion, kind and metadata, so these are the cases where skipping the
// rest could go wrong.
func TestDecodeHostileObjects(t *testing.T) {
	hugeSpec := `"spec":{"tasks":[` + strings.Repeat(`{"name":"w","template":{"metadata":{"labels":{"metadata":"}"}},"spec":{"containers":[{"name":"main","args":["\"metadata\":{","\\"]}]}}},`, 40_000) + `{}]}`
	nested := func(depth int) string { return `"spec":` + strings.Repeat(`[`, depth) + strings.Repeat(`]`, depth) }
	jobs := newJobMutator(t, admissionTime)
	for _, tc := range []struct {
		name string
		raw  string
		// wantDenied is the denial's message (a part of it); "" for an allowed request whose
		// patch must be the one the same object gets with its members in the usual order.
		wantDenied string
		// same is that object, when it is not the request object itself.
		same string
	}{
		{name: "huge spec", raw: `{` + jobHead + `,"metadata":{"labels":{"team":"a"}},` + hugeSpec + `}`},
		{name: "metadata after spec", raw: `{` + jobHead + `,` + hugeSpec + `,"metadata":{"labels":{"team":"a"}}}`,
			same: `{` + jobHead + `,"metadata":{"labels":{"team":"a"}}}`},
		{name: "kind and apiVersion last", raw: `{"metadata":{"labels":{"team":"a"}},"spec":{},"kind":"Job","apiVersion":"batch.volcano.sh/v1alpha1"}`,
			same: `{` + jobHead + `,"metadata":{"labels":{"team":"a"}}}`},
		{name: "metadata's name escaped", raw: `{` + jobHead + `,"metad\u0061ta":{"labels":{"team":"a"}}}`,
			same: `{` + jobHead + `,"metadata":{"labels":{"team":"a"}}}`},
		// JSON names are case-sensitive, as the API server decodes them: this is not metadata.
		{name: "Metadata capitalised", raw: `{` + jobHead + `,"Metadata":{"finalizers":["` + tracking.JobFinalizer + `"]}}`,
			same: `{` + jobHead + `}`},
		{name: "nesting at encoding/json's limit", raw: `{` + jobHead + `,"metadata":{},` + nested(9_999) + `}`, same: `{` + jobHead + `,"metadata":{}}`},
		{name: "metadata twice", raw: `{` + jobHead + `,"metadata":{"finalizers":["` + tracking.JobFinalizer + `"]},"spec":{},"metadata":{}}`,
			wantDenied: `request.object has "metadata" twice`},
		{name: "kind twice", raw: `{` + jobHead + `,"metadata":{},"kind":"Job"}`, wantDenied: `request.object has "kind" twice`},
		{name: "metadata twice, once escaped", raw: `{` + jobHead + `,"metadata":{},"metad\u0061ta":{}}`, wantDenied: `request.object has "metadata" twice`},
		{name: "invalid JSON after metadata", raw: `{` + jobHead + `,"metadata":{},"spec":{]}`, wantDenied: "decode request.object as batch.volcano.sh/v1alpha1 Job"},
		{name: "invalid string escape in spec", raw: `{` + jobHead + `,"metadata":{},"spec":"\x"}`, wantDenied: "decode request.object"},
		{name: "control character in spec", raw: `{` + jobHead + `,"metadata":{},"spec":"a` + "\n" + `"}`, wantDenied: "decode request.object"},
		{name: "invalid number in spec", raw: `{` + jobHead + `,"metadata":{},"spec":01}`, wantDenied: "decode request.object"},
		{name: "trailing bytes", raw: `{` + jobHead + `,"metadata":{}} {}`, wantDenied: "decode request.object"},
		{name: "nesting beyond encoding/json's limit", raw: `{` + jobHead + `,"metadata":{},` + nested(10_000) + `}`, wantDenied: "decode request.object"},
		{name: "array", raw: `[{` + jobHead + `,"metadata":{}}]`, wantDenied: "decode request.object as batch.volcano.sh/v1alpha1 Job: the value is an array, want an object"},
		{name: "string", raw: `"{}"`, wantDenied: "decode request.object as batch.volcano.sh/v1alpha1 Job: the value is a string, want an object"},
		{name: "number", raw: ` 1 `, wantDenied: "decode request.object as batch.volcano.sh/v1alpha1 Job: the value is a number, want an object"},
		{name: "boolean", raw: `true`, wantDenied: "decode request.object as batch.volcano.sh/v1alpha1 Job: the value is a boolean, want an object"},
		{name: "null", raw: ` null`, wantDenied: "request.object is null, want a batch.volcano.sh/v1alpha1 Job"},
		{name: "whitespace", raw: " \n", wantDenied: "decode request.object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := jobs.Handle(t.Context(), jobRequest([]byte(tc.raw), "alice", "team-a"))
			if tc.wantDenied != "" {
				if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusBadRequest || len(resp.Patches) != 0 {
					t.Fatalf("allowed=%v result=%+v patches=%v, want a 400 without patch", resp.Allowed, resp.Result, resp.Patches)
				}
				if !strings.Contains(resp.Result.Message, tc.wantDenied) {
					t.Errorf("message = %q, want it to contain %q", resp.Result.Message, tc.wantDenied)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			same := tc.same
			if same == "" {
				same = tc.raw
			}
			want := jobs.Handle(t.Context(), jobRequest([]byte(same), "alice", "team-a"))
			if diff := cmp.Diff(want.Patches, resp.Patches); diff != "" {
				t.Errorf("patch differs from the same object's in the usual order (-want +got):\n%s", diff)
			}
			if len(tc.raw) < 1<<20 {
				// reflect.DeepEqual first: cmp.Diff takes minutes over 10,000 nested arrays.
				patched := applyPatch(t, []byte(tc.raw), resp)
				if before, after := withoutMetadata(decodeMap(t, []byte(tc.raw))), withoutMetadata(decodeMap(t, patched)); !reflect.DeepEqual(before, after) {
					t.Errorf("fields outside metadata changed (-want +got):\n%s", cmp.Diff(before, after))
				}
			}
		})
	}
}

// A pod's verdict reads its owner references: one whose metadata follows a huge spec, or whose
// owner reference has a field of the wrong type, gets the verdict it gets in the usual order.
func TestDecodeHostilePods(t *testing.T) {
	owner := `"ownerReferences":[{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","name":"train","uid":"1","controller":true}]`
	label := `"labels":{"` + tracking.JobPodLabel + `":"train"}`
	spec := `"spec":{"containers":[` + strings.Repeat(`{"name":"main","image":"busybox","args":["}]"]},`, 50_000) + `{}]}`
	pods := NewPodMutator()
	for _, tc := range []struct {
		name, raw  string
		wantPatch  bool
		wantDenied string
	}{
		{"metadata after a huge spec", `{"apiVersion":"v1","kind":"Pod",` + spec + `,"metadata":{` + label + `,` + owner + `}}`, true, ""},
		// Names are case-sensitive, as the API server decodes them: not an owner reference.
		{"owner references capitalised", `{"apiVersion":"v1","kind":"Pod","metadata":{` + label + `,"OwnerReferences":[{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","name":"train","uid":"1","controller":true}]}}`, false, ""},
		{"owner reference controller a string", `{"apiVersion":"v1","kind":"Pod","metadata":{` + label + `,"ownerReferences":[{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","name":"train","uid":"1","controller":"true"}]}}`, false, "decode metadata.ownerReferences"},
		{"metadata twice", `{"apiVersion":"v1","kind":"Pod","metadata":{},` + spec + `,"metadata":{` + label + `,` + owner + `}}`, false, `request.object has "metadata" twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := pods.Handle(t.Context(), podRequest([]byte(tc.raw)))
			if tc.wantDenied != "" {
				if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tc.wantDenied) {
					t.Fatalf("allowed=%v result=%+v, want a denial naming %q", resp.Allowed, resp.Result, tc.wantDenied)
				}
				return
			}
			if !resp.Allowed || (len(resp.Patches) != 0) != tc.wantPatch {
				t.Fatalf("allowed=%v patches=%v result=%+v, want allowed with a patch: %v", resp.Allowed, resp.Patches, resp.Result, tc.wantPatch)
			}
		})
	}
}
