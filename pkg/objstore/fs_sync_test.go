package objstore

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFSSyncsNewDirectories: a Put that creates directories makes each durable, up to the root:
// a file's entry survives a power loss only if its directory's entry in its parent does too.
func TestFSSyncsNewDirectories(t *testing.T) {
	root := t.TempDir()
	s, err := NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	var synced []string
	orig := syncDir
	syncDir = func(dir string) error { synced = append(synced, dir); return orig(dir) }
	t.Cleanup(func() { syncDir = orig })
	if err := s.Put(t.Context(), "a/b/c/log.gz", strings.NewReader("x"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a/b/c", "a/b", "a", "."} {
		if !slices.Contains(synced, filepath.Join(root, want)) {
			t.Errorf("directory %s not synced (synced %v)", want, synced)
		}
	}
}
