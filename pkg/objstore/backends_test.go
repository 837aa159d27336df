package objstore

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
)

func TestS3ErrorMapsOnlyMissingKeys(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{minio.ErrorResponse{Code: minio.NoSuchKey, StatusCode: 404}, true},
		{minio.ErrorResponse{Code: minio.NoSuchBucket, StatusCode: 404}, false},
		{minio.ErrorResponse{Code: "AccessDenied", StatusCode: 403}, false},
		{errors.New("connection refused"), false},
	} {
		if got := errors.Is(s3Error(tc.err), ErrNotFound); got != tc.want {
			t.Errorf("errors.Is(s3Error(%v), ErrNotFound) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestGCSErrorMapsOnlyMissingObjects(t *testing.T) {
	if !errors.Is(gcsError(storage.ErrObjectNotExist), ErrNotFound) {
		t.Error("ErrObjectNotExist does not map to ErrNotFound")
	}
	if errors.Is(gcsError(storage.ErrBucketNotExist), ErrNotFound) {
		t.Error("ErrBucketNotExist maps to ErrNotFound; a missing bucket is a configuration error")
	}
}

func TestNewS3RejectsIncompleteConfig(t *testing.T) {
	_, err := NewS3(S3Config{Endpoint: "http://minio:9000", PartSize: 1, CAFile: "ca.pem"})
	for _, want := range []string{"Endpoint", "Bucket is empty", "AccessKey or SecretKey", "PartSize 1", "CAFile is set"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewS3 error = %v, want it to mention %q", err, want)
		}
	}
}

// hangingServer accepts requests and never answers them, like a service behind a dead link.
func hangingServer(t *testing.T) *httptest.Server {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server notices a client hanging up only once the body is consumed.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() {
		close(stop)
		srv.Close()
	})
	return srv
}

// TestTimeoutsBoundEveryCall checks that a service that never answers fails each call after its
// timeout, even when the caller's context has no deadline.
func TestTimeoutsBoundEveryCall(t *testing.T) {
	timeouts := Timeouts{Call: 200 * time.Millisecond, Transfer: 300 * time.Millisecond}
	srv := hangingServer(t)

	s3, err := NewS3(S3Config{
		Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "archive", Region: "us-east-1",
		PathStyle: true, AccessKey: "a", SecretKey: "s", Timeouts: timeouts,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", srv.Listener.Addr().String())
	gcs, err := NewGCS(t.Context(), GCSConfig{Bucket: "archive", Timeouts: timeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gcs.Close() })

	for name, s := range map[string]Store{"s3": s3, "gcs": gcs} {
		calls := map[string]func(ctx context.Context) error{
			"Put": func(ctx context.Context) error {
				return s.Put(ctx, "k", strings.NewReader("data"), PutOptions{})
			},
			"Compose": func(ctx context.Context) error {
				return s.Compose(ctx, "k", []string{"a", "b"}, PutOptions{})
			},
			"Get": func(ctx context.Context) error {
				rc, err := s.Get(ctx, "k")
				if err == nil {
					rc.Close()
				}
				return err
			},
			"Stat":   func(ctx context.Context) error { _, err := s.Stat(ctx, "k"); return err },
			"Delete": func(ctx context.Context) error { return s.Delete(ctx, "k") },
			"List":   func(ctx context.Context) error { return s.List(ctx, "", func(ObjectInfo) error { return nil }) },
			"Ping":   func(ctx context.Context) error { return s.Ping(ctx) },
		}
		for call, fn := range calls {
			t.Run(name+"/"+call, func(t *testing.T) {
				start := time.Now()
				err := fn(t.Context()) // no deadline of its own: the store's must apply
				if elapsed := time.Since(start); err == nil || elapsed > 10*time.Second {
					t.Errorf("%s against a hanging service: error %v after %s, want an error within the timeout", call, err, elapsed)
				}
				if testing.Verbose() {
					t.Logf("%s: %v after %s", call, err, time.Since(start))
				}
			})
		}
	}
}

// TestComposeRejectsBadArguments checks that every backend refuses what no backend may compose,
// before it calls the service.
func TestComposeRejectsBadArguments(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "no request expected", http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	s3, err := NewS3(S3Config{
		Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "archive", Region: "us-east-1",
		PathStyle: true, AccessKey: "a", SecretKey: "s",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", srv.Listener.Addr().String())
	gcs, err := NewGCS(t.Context(), GCSConfig{Bucket: "archive"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gcs.Close() })
	fs, err := NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		dst  string
		srcs []string
		want string // in the error
	}{
		{"no sources", "log.gz", nil, "compose log.gz: no source objects"},
		{"empty source list", "log.gz", []string{}, "compose log.gz: no source objects"},
		{"destination among sources", "log.gz", []string{"seg-0", "log.gz", "seg-1"}, "compose log.gz: the destination is also source 1"},
		{"invalid destination", "/log.gz", []string{"seg-0"}, `compose /log.gz: invalid object key "/log.gz"`},
		{"invalid source", "log.gz", []string{"seg-0", "a//seg-1"}, `compose log.gz: source 1: invalid object key "a//seg-1"`},
	} {
		for name, s := range map[string]Store{"s3": s3, "gcs": gcs, "fs": fs} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				err := s.Compose(t.Context(), tc.dst, tc.srcs, PutOptions{})
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Compose(%q, %q) error = %v, want it to contain %q", tc.dst, tc.srcs, err, tc.want)
				}
			})
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the service got %d requests, want none", n)
	}
	if err := fs.List(t.Context(), "", func(o ObjectInfo) error {
		t.Errorf("object %q stored by a refused Compose", o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestCopyable(t *testing.T) {
	const small = MinPartSize - 1
	for _, tc := range []struct {
		name  string
		sizes []int64
		want  bool
	}{
		{"none", nil, false},
		{"one small", []int64{1}, true},
		{"one of the largest part size", []int64{MaxPartSize}, true},
		{"one above the largest part size", []int64{MaxPartSize + 1}, false},
		{"all but the last at least the smallest part size", []int64{MinPartSize, MaxPartSize, 1}, true},
		{"a small one first", []int64{small, MinPartSize}, false},
		{"a small one between", []int64{MinPartSize, small, MinPartSize}, false},
		{"the most parts", slices.Repeat([]int64{MinPartSize}, maxParts), true},
		{"one part too many", slices.Repeat([]int64{MinPartSize}, maxParts+1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := copyable(tc.sizes); got != tc.want {
				t.Errorf("copyable(%d sizes) = %v, want %v", len(tc.sizes), got, tc.want)
			}
		})
	}
}
