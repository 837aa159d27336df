package admission

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"gomodules.xyz/jsonpatch/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// Helpers over untyped JSON (map[string]any as decoded by encoding/json). Each checks the type of
// what it touches the way a typed decode would, so an object that would not decode is rejected
// instead of half-mutated, and each leaves everything it does not touch as it was.
//
// The helpers that change the object also record the JSON patch operation that makes the same
// change to the request's raw object. Recording instead of diffing a re-encoded copy (what
// controller-runtime's PatchResponseFromRaw does) means the object is decoded once and never
// encoded, and the patch holds only what changed: about half the time and a third of the
// allocations of a VcJob review (docs/performance.md), time the API server waits on every create.

// node is a JSON object inside the request object.
type node struct {
	m map[string]any
	// ptr is the object's JSON pointer in the request object ("" for the root).
	ptr string
	// added is set when the object was absent or null in the request: the operation that adds it
	// carries everything put into it later, so nothing inside it is recorded on its own.
	added bool
}

// patch records the operations that turn the request object into the mutated one.
type patch struct {
	ops []jsonpatch.JsonPatchOperation
}

// root is the request object itself.
func root(obj map[string]any) node { return node{m: obj} }

// pointer is the JSON pointer of n.m[key].
func (n node) pointer(key string) string { return n.ptr + "/" + tracking.PointerEscape(key) }

// put sets n.m[key] = v and records it, unless n was added whole by an earlier operation. "add"
// replaces an existing member, so it serves for new and changed keys alike.
func (p *patch) put(n node, key string, v any) {
	n.m[key] = v
	if !n.added {
		p.ops = append(p.ops, jsonpatch.NewOperation("add", n.pointer(key), v))
	}
}

// object returns n.m[key] as a JSON object, adding an empty one when it is absent or null. path is
// the dotted path of key, for errors.
func (p *patch) object(n node, key, path string) (node, error) {
	if child, ok, err := lookupObject(n, key, path); err != nil || ok {
		return child, err
	}
	child := node{m: map[string]any{}, ptr: n.pointer(key), added: true}
	p.put(n, key, child.m)
	return child, nil
}

// lookupObject returns n.m[key] as a JSON object and true, or false when it is absent or null;
// unlike object it never adds anything.
func lookupObject(n node, key, path string) (node, bool, error) {
	v, ok := n.m[key]
	if !ok || v == nil {
		return node{}, false, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return node{}, false, fmt.Errorf("%s is %s, want an object", path, jsonType(v))
	}
	return node{m: m, ptr: n.pointer(key), added: n.added}, true, nil
}

// stringMap returns n.m[key] as a JSON object of strings (labels, annotations), adding it when it
// is absent or null.
func (p *patch) stringMap(n node, key, path string) (node, error) {
	m, err := p.object(n, key, path)
	if err != nil {
		return node{}, err
	}
	return m, checkStrings(m.m, path)
}

// lookupStringMap is stringMap without adding: false when absent or null.
func lookupStringMap(n node, key, path string) (node, bool, error) {
	m, ok, err := lookupObject(n, key, path)
	if err != nil || !ok {
		return node{}, false, err
	}
	return m, true, checkStrings(m.m, path)
}

func checkStrings(m map[string]any, path string) error {
	for k, v := range m {
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s[%q] is %s, want a string", path, k, jsonType(v))
		}
	}
	return nil
}

// setString sets key to value in a map from stringMap, recording nothing when it already holds it.
func (p *patch) setString(n node, key, value string) {
	if !utf8.ValidString(value) {
		// Compare as the API server will store it, or a second pass would see a change: JSON
		// carries invalid bytes as U+FFFD (a username is the only value from outside).
		b, _ := json.Marshal(value) // a string always encodes
		_ = json.Unmarshal(b, &value)
	}
	if s, ok := n.m[key].(string); !ok || s != value {
		p.put(n, key, value)
	}
}

// addFinalizer appends f to meta.finalizers unless it is there already, keeping every other
// finalizer and their order.
func (p *patch) addFinalizer(meta node, f string) error {
	v, ok := meta.m["finalizers"]
	if !ok || v == nil {
		p.put(meta, "finalizers", []any{f})
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		return fmt.Errorf("metadata.finalizers is %s, want an array of strings", jsonType(v))
	}
	for i, e := range list {
		if _, ok := e.(string); !ok {
			return fmt.Errorf("metadata.finalizers[%d] is %s, want a string", i, jsonType(e))
		}
	}
	if slices.Contains(list, any(f)) {
		return nil
	}
	meta.m["finalizers"] = append(list, f)
	if !meta.added {
		p.ops = append(p.ops, jsonpatch.NewOperation("add", meta.pointer("finalizers")+"/-", f))
	}
	return nil
}

// ownerReferences reads metadata.ownerReferences as the API server decodes it into its types
// (case-sensitive names; unknown names and nulls ignored; a value of the wrong type refused), so
// that a type error here cannot happen in a real request. It reads the decoded values where they
// are: a round trip through JSON took a fifth of a pod's review.
func ownerReferences(meta node) ([]metav1.OwnerReference, error) {
	v := meta.m["ownerReferences"]
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("decode metadata.ownerReferences: it is %s, want an array", jsonType(v))
	}
	refs := make([]metav1.OwnerReference, len(list))
	for i, e := range list {
		if e == nil {
			continue // as encoding/json decodes null into a struct: the zero value
		}
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("decode metadata.ownerReferences[%d]: it is %s, want an object", i, jsonType(e))
		}
		if err := ownerReference(m, &refs[i]); err != nil {
			return nil, fmt.Errorf("decode metadata.ownerReferences[%d]: %w", i, err)
		}
	}
	return refs, nil
}

// ownerReference fills ref from one decoded owner reference, its fields in a fixed order so that
// the first wrong one named is always the same.
func ownerReference(m map[string]any, ref *metav1.OwnerReference) error {
	var uid string
	for _, f := range [...]struct {
		name string
		to   *string
	}{{"apiVersion", &ref.APIVersion}, {"kind", &ref.Kind}, {"name", &ref.Name}, {"uid", &uid}} {
		switch v := m[f.name].(type) {
		case nil:
		case string:
			*f.to = v
		default:
			return fmt.Errorf("%s is %s, want a string", f.name, jsonType(v))
		}
	}
	ref.UID = types.UID(uid)
	for _, f := range [...]struct {
		name string
		to   **bool
	}{{"controller", &ref.Controller}, {"blockOwnerDeletion", &ref.BlockOwnerDeletion}} {
		switch v := m[f.name].(type) {
		case nil:
		case bool:
			*f.to = &v
		default:
			return fmt.Errorf("%s is %s, want a boolean", f.name, jsonType(v))
		}
	}
	return nil
}

// jsonType names the JSON type of a decoded value, for error messages.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
