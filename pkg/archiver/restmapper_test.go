package archiver

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper finds only pods, and counts how often it is asked.
type countingMapper struct {
	meta.RESTMapper
	asked int
}

var podsMapping = meta.RESTMapping{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"},
	GroupVersionKind: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Scope: meta.RESTScopeNamespace}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, _ ...string) (*meta.RESTMapping, error) {
	m.asked++
	if gk.Kind != "Pod" {
		return nil, &meta.NoKindMatchError{GroupKind: gk}
	}
	mapping := podsMapping
	return &mapping, nil
}

func TestKnownMappingsAskOncePerFoundKind(t *testing.T) {
	inner := &countingMapper{}
	m := &knownMappings{RESTMapper: inner}
	pod := schema.GroupKind{Kind: "Pod"}
	for range 3 {
		got, err := m.RESTMapping(pod, "v1")
		if err != nil || *got != podsMapping {
			t.Fatalf("RESTMapping(Pod) = %v, %v; want %v", got, err, podsMapping)
		}
		got.Scope = meta.RESTScopeRoot // a caller's change stays its own
	}
	if inner.asked != 1 {
		t.Errorf("the mapper was asked %d times for a kind it found; want once", inner.asked)
	}
	// A kind not found is asked again each time: it may be installed later.
	job := schema.GroupKind{Group: "batch.volcano.sh", Kind: "Job"}
	for range 2 {
		if _, err := m.RESTMapping(job, "v1alpha1"); !errors.As(err, new(*meta.NoKindMatchError)) {
			t.Fatalf("RESTMapping(Job) error = %v; want NoKindMatchError", err)
		}
	}
	if inner.asked != 3 {
		t.Errorf("the mapper was asked %d times in all; want 3 (once for the pod, twice for the missing job)", inner.asked)
	}
	// Other versions are another question.
	if _, err := m.RESTMapping(pod); err != nil || inner.asked != 4 {
		t.Errorf("RESTMapping(Pod) without a version: err %v, asked %d; want nil, 4", err, inner.asked)
	}
}
