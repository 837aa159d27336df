package objstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/objstore"
)

// TestFSReadOnlyLocks: with WithReadOnlyLocks, objects stored with a RetainUntil are read-only
// files that Delete and a Put or Compose of other bytes refuse to touch (ErrLocked), while the
// same bytes again succeed (a repeated write stays idempotent). Objects without a RetainUntil,
// and every object of a store without the option, stay ordinary files.
func TestFSReadOnlyLocks(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	s, err := objstore.NewFS(root, objstore.WithReadOnlyLocks())
	if err != nil {
		t.Fatal(err)
	}
	locked := objstore.PutOptions{RetainUntil: time.Now().Add(time.Hour)}
	mode := func(key string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(filepath.Join(root, key))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	content := func(key string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, key))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	if err := s.Put(ctx, "job/manifest.json", strings.NewReader("v1"), locked); err != nil {
		t.Fatal(err)
	}
	if m := mode("job/manifest.json"); m != 0o444 {
		t.Errorf("mode of a locked object = %v, want 0444", m)
	}
	if err := s.Delete(ctx, "job/manifest.json"); !errors.Is(err, objstore.ErrLocked) {
		t.Errorf("Delete of a locked object = %v, want ErrLocked", err)
	}
	for _, opts := range []objstore.PutOptions{locked, {}} {
		if err := s.Put(ctx, "job/manifest.json", strings.NewReader("v2"), opts); !errors.Is(err, objstore.ErrLocked) {
			t.Errorf("Put of other bytes over a locked object (RetainUntil %v) = %v, want ErrLocked", opts.RetainUntil, err)
		}
	}
	if err := s.Put(ctx, "job/manifest.json", strings.NewReader("v1"), locked); err != nil {
		t.Errorf("Put of the same bytes over a locked object: %v", err)
	}
	if got := content("job/manifest.json"); got != "v1" {
		t.Errorf("locked object holds %q, want v1", got)
	}

	// Compose: the same concatenation again succeeds, another is refused.
	for _, k := range []string{"seg/0", "seg/1"} {
		if err := s.Put(ctx, k, strings.NewReader(k), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compose(ctx, "job/main.log.gz", []string{"seg/0", "seg/1"}, locked); err != nil {
		t.Fatal(err)
	}
	if err := s.Compose(ctx, "job/main.log.gz", []string{"seg/0", "seg/1"}, locked); err != nil {
		t.Errorf("Compose of the same sources over a locked object: %v", err)
	}
	if err := s.Compose(ctx, "job/main.log.gz", []string{"seg/1", "seg/0"}, locked); !errors.Is(err, objstore.ErrLocked) {
		t.Errorf("Compose of other bytes over a locked object = %v, want ErrLocked", err)
	}
	if got := content("job/main.log.gz"); got != "seg/0seg/1" {
		t.Errorf("locked composed object holds %q, want seg/0seg/1", got)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "job")); len(entries) != 2 {
		t.Errorf("job/ holds %d entries, want 2 (no temporary file left)", len(entries))
	}

	// Unlocked objects are ordinary files.
	if m := mode("seg/0"); m != 0o644 {
		t.Errorf("mode of an unlocked object = %v, want 0644", m)
	}
	for _, k := range []string{"seg/0", "seg/1"} {
		if err := s.Delete(ctx, k); err != nil {
			t.Errorf("Delete of unlocked %s: %v", k, err)
		}
	}

	// A store without the option ignores RetainUntil.
	plain := newFS(t, t.TempDir())
	if err := plain.Put(ctx, "k", strings.NewReader("x"), locked); err != nil {
		t.Fatal(err)
	}
	if err := plain.Delete(ctx, "k"); err != nil {
		t.Errorf("Delete on a store without locks: %v", err)
	}
}
