package archive

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

func TestLayout(t *testing.T) {
	l := Layout{Prefix: "/prod/"}
	j := JobRef{Namespace: "ns", Name: "train", UID: "u1"}
	for got, want := range map[string]string{
		must(l.JobObject(j)): "prod/ns/train/u1/job.json",
		must(l.Manifest(j)):  "prod/ns/train/u1/manifest.json",
		must(l.PodLog(j, "train-w-0", "p1", "main", record.InstanceCurrent)):        "prod/ns/train/u1/pods/train-w-0/p1/main.log.gz",
		must(l.PodLog(j, "train-w-0", "p1", "main", record.PreviousInstance(2))):    "prod/ns/train/u1/pods/train-w-0/p1/main.previous-2.log.gz",
		must(Layout{}.PodLog(j, "train-w-0", "p2", "main", record.InstanceCurrent)): "ns/train/u1/pods/train-w-0/p2/main.log.gz",
		must(l.Segment(j, "train-w-0", "p1", "main", 1, 7)):                         "prod/ns/train/u1/pods/train-w-0/p1/main.run-1.seg-000007.gz",
	} {
		if got != want {
			t.Errorf("key %q, want %q", got, want)
		}
	}
}

// must returns the key of a test's valid components.
func must(key string, err error) string {
	if err != nil {
		panic(err)
	}
	return key
}

func TestLayoutOf(t *testing.T) {
	j := JobRef{Namespace: "ns", Name: "train", UID: "u1"}
	for _, prefix := range []string{"", "prod", "prod/eu-1", "a/ns/train/u1"} {
		l := Layout{Prefix: prefix}
		for _, dir := range []string{must(l.JobDir(j)), JobDirOfLog(must(l.PodLog(j, "train-w-0", "p1", "main", record.PreviousInstance(1))))} {
			got, ok := LayoutOf(j, dir)
			if !ok || got != l {
				t.Errorf("LayoutOf(%q) = %+v, %v; want %+v", dir, got, ok, l)
			}
		}
	}
	for _, dir := range []string{"", "ns/train", "prod/ns/train/u2", "prod/other/train/u1", "xns/train/u1"} {
		if got, ok := LayoutOf(j, dir); ok {
			t.Errorf("LayoutOf(%q) = %+v, true; want false: not the job's directory", dir, got)
		}
	}
}

func TestUploadStreamsGzipWithSizeAndHash(t *testing.T) {
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("line ✓\n"), 100_000)
	got, err := Upload(t.Context(), store, "a/b.log.gz", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	if got.Bytes != int64(len(body)) || got.SHA256 != hex.EncodeToString(sum[:]) || got.StoredBytes <= 0 || got.StoredBytes >= got.Bytes {
		t.Fatalf("stored %+v, want %d bytes, sha256 %x, compressed", got, len(body), sum)
	}
	rc, err := store.Get(t.Context(), "a/b.log.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(back, body) {
		t.Fatalf("read back %d bytes (%v), want the original %d", len(back), err, len(body))
	}
}

type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n > 0 {
		f.n--
		return copy(p, "partial\n"), nil
	}
	return 0, errors.New("connection reset")
}

func TestUploadSourceFailureLeavesNoObject(t *testing.T) {
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = Upload(t.Context(), store, "x.log.gz", &failingReader{n: 3})
	if !IsSourceError(err) {
		t.Fatalf("error %v, want a source error", err)
	}
	if _, err := store.Stat(t.Context(), "x.log.gz"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat after failed upload: %v, want not found", err)
	}
}
