package admission

import (
	"fmt"
	"slices"
)

// Helpers over untyped JSON (map[string]any as decoded by encoding/json). Each checks the type of
// what it touches the way a typed decode would, so an object that would not decode is rejected
// instead of half-mutated, and each leaves everything it does not touch as it was.

// object returns parent[key] as a JSON object, creating it when it is absent or null. path is the
// dotted path of key, for errors.
func object(parent map[string]any, key, path string) (map[string]any, error) {
	v, ok := parent[key]
	if !ok || v == nil {
		m := map[string]any{}
		parent[key] = m
		return m, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is %s, want an object", path, jsonType(v))
	}
	return m, nil
}

// lookupObject returns parent[key] as a JSON object, or nil when it is absent or null; unlike
// object it never adds anything.
func lookupObject(parent map[string]any, key, path string) (map[string]any, error) {
	if v, ok := parent[key]; !ok || v == nil {
		return nil, nil
	}
	return object(parent, key, path)
}

// stringMap returns parent[key] as a JSON object of strings (labels, annotations), creating it when
// it is absent or null.
func stringMap(parent map[string]any, key, path string) (map[string]any, error) {
	m, err := object(parent, key, path)
	if err != nil {
		return nil, err
	}
	return m, checkStrings(m, path)
}

// lookupStringMap is stringMap without creating: nil when absent or null.
func lookupStringMap(parent map[string]any, key, path string) (map[string]any, error) {
	m, err := lookupObject(parent, key, path)
	if err != nil || m == nil {
		return nil, err
	}
	return m, checkStrings(m, path)
}

func checkStrings(m map[string]any, path string) error {
	for k, v := range m {
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s[%q] is %s, want a string", path, k, jsonType(v))
		}
	}
	return nil
}

// lookupString returns the string value of a label or annotation map from stringMap.
func lookupString(m map[string]any, key string) (string, bool) {
	s, ok := m[key].(string)
	return s, ok
}

// addFinalizer appends f to meta.finalizers unless it is there already, keeping every other
// finalizer and their order.
func addFinalizer(meta map[string]any, f string) error {
	v, ok := meta["finalizers"]
	if !ok || v == nil {
		meta["finalizers"] = []any{f}
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
	meta["finalizers"] = append(list, f)
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
