package objstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/objstore/objstoretest"
)

func TestFSConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newFS(t, t.TempDir()) })
}

func newFS(t *testing.T, root string) *objstore.FS {
	t.Helper()
	s, err := objstore.NewFS(root)
	if err != nil {
		t.Fatalf("NewFS: %v", err)
	}
	return s
}

// TestFSLayout checks what a person browsing the directory sees: one plain file per key, no
// leftovers of the upload, and no empty directories after deletes.
func TestFSLayout(t *testing.T) {
	root := filepath.Join(t.TempDir(), "created", "on", "demand")
	s := newFS(t, root)
	ctx := t.Context()

	const key = "ns/job/pod name/main.log.gz"
	if err := s.Put(ctx, key, strings.NewReader("log"), objstore.PutOptions{ContentEncoding: "gzip"}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got, want := s.URL(key), "file://"+root+"/ns/job/pod%20name/main.log.gz"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	if diff := cmp.Diff([]string{"ns/job/pod name/main.log.gz"}, files(t, root)); diff != "" {
		t.Errorf("files under root after Put (-want +got):\n%s", diff)
	}
	b, err := os.ReadFile(filepath.Join(root, "ns", "job", "pod name", "main.log.gz"))
	if err != nil || string(b) != "log" {
		t.Errorf("file content = %q, %v; want %q", b, err, "log")
	}

	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := files(t, root); len(got) != 0 {
		t.Errorf("files under root after Delete = %q, want none", got)
	}
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
		t.Errorf("root after Delete holds %d entries (%v), want none: empty directories are pruned", len(entries), err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after the last Delete: %v", err)
	}
}

// TestFSSkipsLeftoverTempFiles simulates a crash mid-Put: the temporary file stays behind, but it is
// no object.
func TestFSSkipsLeftoverTempFiles(t *testing.T) {
	root := t.TempDir()
	s := newFS(t, root)
	ctx := t.Context()
	if err := s.Put(ctx, "a/done", strings.NewReader("done"), objstore.PutOptions{}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	leftover := filepath.Join(root, "a", ".objstore-tmp-12345")
	if err := os.WriteFile(leftover, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}

	var got []objstore.ObjectInfo
	if err := s.List(ctx, "", func(o objstore.ObjectInfo) error { got = append(got, o); return nil }); err != nil {
		t.Fatalf("List: %v", err)
	}
	if diff := cmp.Diff([]objstore.ObjectInfo{{Key: "a/done", Size: 4}}, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if _, err := s.Stat(ctx, "a/.objstore-tmp-12345"); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Errorf("Stat of the temp file: error = %v, want ErrInvalidKey", err)
	}
}

// TestFSComposeLeavesNoTempFile checks that a Compose failing on a missing source removes its
// temporary file, which List would not show.
func TestFSComposeLeavesNoTempFile(t *testing.T) {
	root := t.TempDir()
	s := newFS(t, root)
	ctx := t.Context()
	if err := s.Put(ctx, "a/seg-0", strings.NewReader("segment"), objstore.PutOptions{}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := s.Compose(ctx, "a/log", []string{"a/seg-0", "a/seg-1"}, objstore.PutOptions{}); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Compose with a missing source: error = %v, want ErrNotFound", err)
	}
	if diff := cmp.Diff([]string{"a/seg-0"}, files(t, root)); diff != "" {
		t.Errorf("files under root after a failed Compose (-want +got):\n%s", diff)
	}
}

func TestNewFSErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{"", file, filepath.Join(file, "below")} {
		if _, err := objstore.NewFS(root); err == nil {
			t.Errorf("NewFS(%q) succeeded, want an error", root)
		}
	}
}

// files lists the regular files under root as slash-separated relative paths.
func files(t *testing.T, root string) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		got = append(got, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
