package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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

func TestPlanParts(t *testing.T) {
	const (
		mib   = 1 << 20
		small = MinPartSize - 1
	)
	src := func(key string, size int64) s3Source { return s3Source{key: key, etag: "etag-" + key, size: size} }
	rng := func(key string, off, n int64) string { return fmt.Sprintf("%s[%d:%d]", key, off, off+n) }
	cp := func(key string, off, n int64) string { return "copy " + rng(key, off, n) }
	up := func(ranges ...string) string { return "upload " + strings.Join(ranges, " ") }
	for _, tc := range []struct {
		name string
		srcs []s3Source
		want []string
	}{
		{"none", nil, nil},
		{"only empty sources", []s3Source{src("a", 0), src("b", 0)}, nil},
		{"one small source", []s3Source{src("a", 1)}, []string{cp("a", 0, 1)}},
		{"large sources and a small last one", []s3Source{src("a", MinPartSize), src("b", 2*MinPartSize), src("c", 1)},
			[]string{cp("a", 0, MinPartSize), cp("b", 0, 2*MinPartSize), cp("c", 0, 1)}},
		{"empty sources between and after", []s3Source{src("a", MinPartSize), src("b", 0), src("c", 1), src("d", 0)},
			[]string{cp("a", 0, MinPartSize), cp("c", 0, 1)}},
		{"small sources up to the smallest part size", []s3Source{src("a", 3*mib), src("b", 2*mib), src("c", 4*mib)},
			[]string{up(rng("a", 0, 3*mib), rng("b", 0, 2*mib)), cp("c", 0, 4*mib)}},
		{"two small sources last", []s3Source{src("a", MinPartSize), src("b", 1), src("c", 1)},
			[]string{cp("a", 0, MinPartSize), up(rng("b", 0, 1), rng("c", 0, 1))}},
		{"a small source then a large one", []s3Source{src("a", mib), src("b", 3*MinPartSize)},
			[]string{up(rng("a", 0, mib), rng("b", 0, MinPartSize-mib)), cp("b", MinPartSize-mib, 2*MinPartSize+mib)}},
		{"a small source then a large one too small to split", []s3Source{src("a", mib), src("b", MinPartSize+1), src("c", 1)},
			[]string{up(rng("a", 0, mib), rng("b", 0, MinPartSize+1)), cp("c", 0, 1)}},
		{"small sources then large ones", []s3Source{src("a", small), src("b", small), src("c", MinPartSize), src("d", MinPartSize)},
			[]string{up(rng("a", 0, small), rng("b", 0, small)), cp("c", 0, MinPartSize), cp("d", 0, MinPartSize)}},
		{"a source above the largest part size", []s3Source{src("a", 2*MaxPartSize+1)},
			[]string{cp("a", 0, (2*MaxPartSize+1)/3), cp("a", (2*MaxPartSize+1)/3, (2*MaxPartSize+1)*2/3-(2*MaxPartSize+1)/3),
				cp("a", (2*MaxPartSize+1)*2/3, 2*MaxPartSize+1-(2*MaxPartSize+1)*2/3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := planParts(tc.srcs)
			var got []string
			for _, p := range parts {
				var ranges []string
				for _, r := range p.ranges {
					ranges = append(ranges, rng(r.src.key, r.off, r.n))
				}
				if p.copy {
					got = append(got, "copy "+strings.Join(ranges, " "))
				} else {
					got = append(got, up(ranges...))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("planParts (-want +got):\n%s", diff)
			}
			checkPlan(t, tc.srcs, parts)
		})
	}
}

// TestPlanPartsRules checks the rules of a multipart upload on plans of random sources, sized
// around the smallest part size, where the planner's cases meet.
func TestPlanPartsRules(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int64{0, 1, 1 << 20, MinPartSize - 1, MinPartSize, MinPartSize + 1, 2*MinPartSize - 1, 3 * MinPartSize, MaxPartSize + 1}
	for range 2000 {
		srcs := make([]s3Source, 1+r.IntN(8))
		for i := range srcs {
			srcs[i] = s3Source{key: fmt.Sprintf("seg-%d", i), size: sizes[r.IntN(len(sizes))] + r.Int64N(3) - 1}
			srcs[i].size = max(srcs[i].size, 0)
		}
		checkPlan(t, srcs, planParts(srcs))
		if t.Failed() {
			t.Fatalf("sources: %+v", srcs)
		}
	}
}

// checkPlan checks that parts hold the bytes of srcs, in order, each once, that each part is of a
// size S3 accepts (the last may be small), that copied parts are one range of one source, and
// that uploaded parts are under twice the smallest part size.
func checkPlan(t *testing.T, srcs []s3Source, parts []s3Part) {
	t.Helper()
	var want, got []s3Range // one byte range after the other, merged where contiguous
	appendRange := func(rs []s3Range, r s3Range) []s3Range {
		if n := len(rs); n > 0 && rs[n-1].src == r.src && rs[n-1].off+rs[n-1].n == r.off {
			rs[n-1].n += r.n
			return rs
		}
		return append(rs, r)
	}
	for _, src := range srcs {
		if src.size > 0 {
			want = append(want, s3Range{src: src, n: src.size})
		}
	}
	for i, p := range parts {
		var size int64
		for _, r := range p.ranges {
			if r.n <= 0 {
				t.Errorf("part %d has an empty range %+v", i+1, r)
			}
			size += r.n
			got = appendRange(got, r)
		}
		last := i == len(parts)-1
		switch {
		case size != p.size:
			t.Errorf("part %d: size %d, want the sum of its ranges, %d", i+1, p.size, size)
		case size > MaxPartSize:
			t.Errorf("part %d: %d bytes, more than the largest part size", i+1, size)
		case size < MinPartSize && !last:
			t.Errorf("part %d of %d: %d bytes, less than the smallest part size", i+1, len(parts), size)
		case p.copy && len(p.ranges) != 1:
			t.Errorf("part %d: copied from %d ranges, want one", i+1, len(p.ranges))
		case !p.copy && size >= 2*MinPartSize:
			t.Errorf("part %d: uploads %d bytes, want less than twice the smallest part size", i+1, size)
		}
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(s3Range{}, s3Source{}), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("bytes of the parts (-want +got):\n%s", diff)
	}
}

// TestS3ComposeRefusesTooManyParts composes sources that need more parts than an S3 upload may
// have, against a service that knows their sizes: Compose must say so before creating an upload.
func TestS3ComposeRefusesTooManyParts(t *testing.T) {
	var uploads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			uploads.Add(1)
			http.Error(w, "only stats expected", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(MinPartSize))
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	}))
	t.Cleanup(srv.Close)
	s3, err := NewS3(S3Config{
		Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "archive", Region: "us-east-1",
		PathStyle: true, AccessKey: "a", SecretKey: "s",
	})
	if err != nil {
		t.Fatal(err)
	}
	srcs := make([]string, maxParts+1)
	for i := range srcs {
		srcs[i] = fmt.Sprintf("seg-%05d", i)
	}
	err = s3.Compose(t.Context(), "log.gz", srcs, PutOptions{})
	if want := "the 10001 sources need 10001 parts, more than the 10000 of an S3 upload"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Compose error = %v, want it to contain %q", err, want)
	}
	if n := uploads.Load(); n != 0 {
		t.Errorf("the service got %d requests other than stats, want none", n)
	}
}
