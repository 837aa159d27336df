package archiver

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// recordedState remembers, by object name, a fingerprint of what was last recorded of each
// object (a job's UID and resourceVersion, a pod's row), so that an event that changes nothing
// recorded costs no database write: a job reconciled again because one of its pods was released,
// a pod whose finalizer or conditions changed. Entries are forgotten when the object is gone. A
// restart starts empty and every upsert is idempotent, so a missing entry costs one write, never
// a wrong record. The zero value is ready to use.
type recordedState struct {
	mu sync.Mutex
	m  map[types.NamespacedName]string
}

// same reports whether fingerprint is what was last recorded under key.
func (s *recordedState) same(key types.NamespacedName, fingerprint string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return ok && v == fingerprint
}

// get returns what was last recorded under key ("" if nothing).
func (s *recordedState) get(key types.NamespacedName) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key]
}

// set remembers that fingerprint is now recorded under key.
func (s *recordedState) set(key types.NamespacedName, fingerprint string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[types.NamespacedName]string{}
	}
	s.m[key] = fingerprint
}

// forget drops what was remembered under key (the object is gone, or its record must be written
// again).
func (s *recordedState) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}
