package admission

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
)

// ownerReferences reads metadata.ownerReferences as the API server decodes it into its types
// (sigs.k8s.io/json: names are case-sensitive, unknown ones and nulls are ignored, a value of the
// wrong type is an error), so that the owners the webhook records and the pods it recognises are
// the ones the API server stores.
func TestOwnerReferencesDecodeAsTheAPIServer(t *testing.T) {
	for _, refs := range []string{
		`null`,
		`[]`,
		`[{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","name":"train","uid":"1","controller":true,"blockOwnerDeletion":false}]`,
		`[{"apiVersion":"v1","kind":"ConfigMap","name":"a","uid":"1"},{"apiVersion":"flow.volcano.sh/v1alpha1","kind":"JobFlow","name":"f","uid":"2","controller":true}]`,
		`[null,{"name":null,"controller":null,"uid":"x","future":{"a":[1]}}]`,
		`[{"name":"first","name":"second"}]`,
		// Case-sensitive: none of these is a field of an OwnerReference.
		`[{"APIVersion":"batch.volcano.sh/v1alpha1","Kind":"Job","NAME":"train","Uid":"1","Controller":true}]`,
		`{}`,
		`"x"`,
		`[1]`,
		`[[]]`,
		`[{"name":1}]`,
		`[{"uid":false}]`,
		`[{"controller":"true"}]`,
		`[{"blockOwnerDeletion":1}]`,
		`[{"kind":{}}]`,
	} {
		t.Run(refs, func(t *testing.T) {
			var want struct {
				OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
			}
			wantErr := sigsjson.UnmarshalCaseSensitivePreserveInts([]byte(`{"ownerReferences":`+refs+`}`), &want)
			var meta map[string]any
			if err := json.Unmarshal([]byte(`{"ownerReferences":`+refs+`}`), &meta); err != nil {
				t.Fatal(err)
			}
			got, err := ownerReferences(node{m: meta})
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("error %v, want one: %v (the API server's decoding: %v)", err, wantErr != nil, wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "decode metadata.ownerReferences") {
					t.Errorf("error %q, want it to name metadata.ownerReferences", err)
				}
				return
			}
			if diff := cmp.Diff(want.OwnerReferences, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("owner references (-the API server's +ours):\n%s", diff)
			}
		})
	}
}
