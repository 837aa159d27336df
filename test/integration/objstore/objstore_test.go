package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
	"google.golang.org/api/option"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/objstore/objstoretest"
	"github.com/jobvault/jobvault/test/testbed"
)

// The object store conformance suite against real services: MinIO for the S3 backend and
// fake-gcs-server for the GCS backend, each store wrapped to report the content type and encoding
// it keeps (objstoretest.MetadataStore). The filesystem backend runs the same suite in
// pkg/objstore's unit tests.

func TestObjstoreConformance(t *testing.T) {
	t.Run("S3", func(t *testing.T) { objstoretest.Run(t, newMinIOStore) })
	t.Run("GCS", func(t *testing.T) { objstoretest.Run(t, newGCSStore) })
}

// newMinIOStore uses the smallest part size S3 allows, so the suite's large object spans three
// parts and cancellations hit an upload with parts already stored.
func newMinIOStore(t *testing.T) objstore.Store {
	m := testbed.MinIO(t)
	s, err := objstore.NewS3(objstore.S3Config{
		Endpoint: m.Endpoint, Bucket: m.Bucket, AccessKey: m.AccessKey, SecretKey: m.SecretKey,
		PathStyle: true, PartSize: objstore.MinPartSize,
	})
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	client, err := testbed.MinIOInstance(t).Client()
	if err != nil {
		t.Fatalf("MinIO client: %v", err)
	}
	return s3Metadata{Store: s, client: client, bucket: m.Bucket}
}

// s3Metadata reads what S3 stored with an object through minio-go, for the suite's checks.
type s3Metadata struct {
	objstore.Store
	client *minio.Client
	bucket string
}

var _ objstoretest.MetadataStore = s3Metadata{}

func (s s3Metadata) Metadata(ctx context.Context, key string) (objstore.PutOptions, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return objstore.PutOptions{}, err
	}
	return objstore.PutOptions{ContentType: info.ContentType, ContentEncoding: info.Metadata.Get("Content-Encoding")}, nil
}

// newGCSStore uses 4 MiB chunks, so the suite's large object is a multi-chunk resumable upload;
// objects stay far below the 64 MiB beyond which fake-gcs-server's resumable uploads get slow.
func newGCSStore(t *testing.T) objstore.Store {
	g := testbed.GCS(t)
	t.Setenv("STORAGE_EMULATOR_HOST", g.Host)
	s, err := objstore.NewGCS(t.Context(), objstore.GCSConfig{Bucket: g.Bucket, ChunkSize: 4 << 20})
	if err != nil {
		t.Fatalf("NewGCS: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	client, err := storage.NewClient(t.Context(), option.WithoutAuthentication())
	if err != nil {
		t.Fatalf("GCS client: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	return gcsMetadata{Store: s, bucket: client.Bucket(g.Bucket)}
}

// gcsMetadata reads what GCS stored with an object through the Go client, for the suite's checks.
type gcsMetadata struct {
	objstore.Store
	bucket *storage.BucketHandle
}

var _ objstoretest.MetadataStore = gcsMetadata{}

func (g gcsMetadata) Metadata(ctx context.Context, key string) (objstore.PutOptions, error) {
	attrs, err := g.bucket.Object(key).Attrs(ctx)
	if err != nil {
		return objstore.PutOptions{}, err
	}
	return objstore.PutOptions{ContentType: attrs.ContentType, ContentEncoding: attrs.ContentEncoding}, nil
}

// TestObjstoreS3ComposeCopiesServerSide checks where S3 composes, by the bytes that pass through
// the client: a run of sources smaller than the smallest part size (5 MiB) is streamed down and
// up again once, completed if need be with the start of the next source; the rest, large sources
// and a small last one, are copied by the service.
func TestObjstoreS3ComposeCopiesServerSide(t *testing.T) {
	const (
		mib     = 1 << 20
		minPart = objstore.MinPartSize
	)
	m := testbed.MinIO(t)
	var moved atomic.Int64
	direct := newS3Store(t, m, m.Endpoint, objstore.Timeouts{})
	proxied := newS3Store(t, m, proxy(t, m.Endpoint, proxyOptions{moved: &moved}), objstore.Timeouts{})
	for _, tc := range []struct {
		name     string
		sizes    []int
		streamed int64 // bytes of the sources read through the client
	}{
		{"each but the last at least 5 MiB", []int{minPart, minPart, 1000}, 0},
		{"small sources then large ones", []int{2 * mib, 3 * mib, minPart, minPart + 1, 1000}, 5 * mib},
		{"a small source then a large one", []int{mib, 2 * minPart}, minPart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := strings.ReplaceAll(tc.name, " ", "-")
			srcs, want := putSources(t, direct, dst, tc.sizes)
			moved.Store(0)
			if err := proxied.Compose(t.Context(), dst, srcs, objstore.PutOptions{ContentType: "text/plain"}); err != nil {
				t.Fatalf("Compose: %v", err)
			}
			total := int64(len(want))
			t.Logf("Compose of %d bytes moved %d bytes through the client", total, moved.Load())
			// Down and up again, plus a few requests' worth: headers, XML, chunk signatures.
			if low, high := 2*tc.streamed, 2*tc.streamed+128<<10; moved.Load() < low || moved.Load() > high {
				t.Errorf("Compose moved %d bytes through the client, want %d to %d: %d bytes of the sources streamed down and up, the rest copied server-side",
					moved.Load(), low, high, tc.streamed)
			}
			assertObject(t, direct, dst, want)
		})
	}
}

// TestObjstoreS3ComposeOutlastsTransferTimeout composes, through a link slow enough that moving
// all the sources takes several Transfer timeouts, many sources too small to be copied
// server-side: each part fits in the timeout, so the Compose succeeds, byte for byte, streaming
// the parts rather than buffering them.
func TestObjstoreS3ComposeOutlastsTransferTimeout(t *testing.T) {
	const (
		transfer = 2 * time.Second
		rate     = 8 << 20 // bytes per second of each request or response body: a 5 MiB part in 0.6 s
		n        = 50      // sources of about 1 MiB: 10 parts of 5 MiB, 6 s
	)
	m := testbed.MinIO(t)
	direct := newS3Store(t, m, m.Endpoint, objstore.Timeouts{})
	slow := newS3Store(t, m, proxy(t, m.Endpoint, proxyOptions{bytesPerSecond: rate}), objstore.Timeouts{Transfer: transfer})
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = 1<<20 + i // distinct sizes, distinct contents
	}
	srcs, want := putSources(t, direct, "slow", sizes)
	if err := slow.Ping(t.Context()); err != nil { // connections set up outside the measurement
		t.Fatal(err)
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	err := slow.Compose(t.Context(), "slow.log.gz", srcs, objstore.PutOptions{ContentType: "text/plain", ContentEncoding: "gzip"})
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("Compose after %s: %v", elapsed.Round(time.Millisecond), err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("Compose of %d MiB in %s (Transfer timeout %s) allocated %d KiB in total, proxy included",
		len(want)>>20, elapsed.Round(time.Millisecond), transfer, allocated>>10)
	if elapsed < 2*transfer {
		t.Errorf("Compose took %s, want at least twice the Transfer timeout %s for the test to mean anything: is the proxy slow?", elapsed, transfer)
	}
	// Streaming allocates about a fifth of the bytes it moves, in minio-go's chunk signatures and
	// the proxy's buffers, all short-lived; buffering each part would allocate at least all of
	// them.
	if limit := uint64(len(want) / 2); allocated > limit {
		t.Errorf("Compose allocated %d KiB, want at most %d KiB, half the bytes streamed: is a part buffered?", allocated>>10, limit>>10)
	}
	assertObject(t, direct, "slow.log.gz", want)
}

// TestObjstoreGCSComposeOutlastsTransferTimeout composes, from a service far enough away that
// all the requests take several timeouts, more sources than one compose request takes: each
// request fits in its timeout, so the Compose succeeds, byte for byte.
func TestObjstoreGCSComposeOutlastsTransferTimeout(t *testing.T) {
	const (
		timeout = time.Second
		latency = 40 * time.Millisecond
		n       = 2*32 + 1 // 65 metadata reads, 3 compose requests, 2 deletions: about 3 s
	)
	g := testbed.GCS(t)
	t.Setenv("STORAGE_EMULATOR_HOST", g.Host)
	direct, err := objstore.NewGCS(t.Context(), objstore.GCSConfig{Bucket: g.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = 1000 + i
	}
	srcs, want := putSources(t, direct, "far", sizes)

	t.Setenv("STORAGE_EMULATOR_HOST", proxy(t, g.Host, proxyOptions{latency: latency}))
	far, err := objstore.NewGCS(t.Context(), objstore.GCSConfig{Bucket: g.Bucket,
		Timeouts: objstore.Timeouts{Call: timeout, Transfer: timeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { far.Close() })
	start := time.Now()
	err = far.Compose(t.Context(), "far.log.gz", srcs, objstore.PutOptions{ContentType: "text/plain", ContentEncoding: "gzip"})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Compose after %s: %v", elapsed.Round(time.Millisecond), err)
	}
	t.Logf("Compose of %d sources in %s (timeouts %s)", n, elapsed.Round(time.Millisecond), timeout)
	if elapsed < 2*timeout {
		t.Errorf("Compose took %s, want at least twice the timeout %s for the test to mean anything: is the proxy slow?", elapsed, timeout)
	}
	assertObject(t, direct, "far.log.gz", want)
	var left []string
	if err := direct.List(t.Context(), "far.log.gz.", func(o objstore.ObjectInfo) error {
		left = append(left, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("temporary objects left behind: %q", left)
	}
}

// TestObjstoreS3FailedComposeLeavesNoUpload fails a part of a Compose, copied server-side or
// uploaded through the client: the Compose must fail, naming the source, and abort its multipart
// upload, leaving neither an object nor parts behind.
func TestObjstoreS3FailedComposeLeavesNoUpload(t *testing.T) {
	m := testbed.MinIO(t)
	client, err := testbed.MinIOInstance(t).Client()
	if err != nil {
		t.Fatal(err)
	}
	direct := newS3Store(t, m, m.Endpoint, objstore.Timeouts{})
	for _, tc := range []struct {
		name   string
		sizes  []int
		fail   func(r *http.Request) bool
		source int // named in the error
	}{
		{"copy of the second part", []int{objstore.MinPartSize, objstore.MinPartSize, 1000},
			func(r *http.Request) bool {
				return r.Header.Get("X-Amz-Copy-Source") != "" && r.URL.Query().Get("partNumber") == "2"
			}, 1},
		{"read of a source of an uploaded part", []int{objstore.MinPartSize, 1 << 20, 1 << 20, 1000},
			func(r *http.Request) bool {
				return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/seg-2")
			}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := strings.ReplaceAll(tc.name, " ", "-")
			srcs, _ := putSources(t, direct, dst, tc.sizes)
			proxied := newS3Store(t, m, proxy(t, m.Endpoint, proxyOptions{fail: tc.fail}), objstore.Timeouts{})
			err := proxied.Compose(t.Context(), dst, srcs, objstore.PutOptions{})
			if err == nil {
				t.Fatal("Compose succeeded although a part failed")
			}
			t.Logf("Compose error (expected): %v", err)
			if !strings.Contains(err.Error(), srcs[tc.source]) {
				t.Errorf("Compose error = %v, want it to name %s", err, srcs[tc.source])
			}
			if _, err := direct.Stat(t.Context(), dst); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("Stat after failed Compose: error = %v, want ErrNotFound", err)
			}
			for u := range client.ListIncompleteUploads(t.Context(), m.Bucket, dst, true) {
				t.Errorf("upload left behind: %+v", u)
			}
		})
	}
}

func newS3Store(t *testing.T, m testbed.S3, endpoint string, timeouts objstore.Timeouts) objstore.Store {
	t.Helper()
	s, err := objstore.NewS3(objstore.S3Config{Endpoint: endpoint, Bucket: m.Bucket, AccessKey: m.AccessKey,
		SecretKey: m.SecretKey, PathStyle: true, PartSize: objstore.MinPartSize, Timeouts: timeouts})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// proxyOptions say what proxy does besides passing requests on; the zero value does nothing.
type proxyOptions struct {
	// moved, if set, adds up the bytes of every request and response body.
	moved *atomic.Int64
	// fail, if set, selects the requests answered with an S3 error that is not retried.
	fail func(*http.Request) bool
	// bytesPerSecond, if not zero, limits the rate at which each request or response body is
	// read, as a slow link would.
	bytesPerSecond int64
	// latency delays every request, as a distant service would.
	latency time.Duration
	// record, if set, sees every request before it is passed on (not its body).
	record func(*http.Request)
}

// proxy returns the address of a proxy to the plain HTTP service at host:port target that does
// what opts say. The Host header passes unchanged, so S3 request signatures made for the proxy's
// address still match.
func proxy(t *testing.T, target string, opts proxyOptions) string {
	t.Helper()
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	rp.ModifyResponse = func(resp *http.Response) error {
		resp.Body = &proxyBody{ReadCloser: resp.Body, opts: opts}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opts.fail != nil && opts.fail(r) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>failed by the test</Message></Error>`)
			return
		}
		if opts.record != nil {
			opts.record(r)
		}
		time.Sleep(opts.latency)
		r.Body = &proxyBody{ReadCloser: r.Body, opts: opts}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// putSources stores objects of sizes, each of distinct pseudo-random bytes, under prefix, and
// returns their keys and their concatenation.
func putSources(t *testing.T, s objstore.Store, prefix string, sizes []int) ([]string, []byte) {
	t.Helper()
	var keys []string
	var all []byte
	for i, size := range sizes {
		key := fmt.Sprintf("%s/seg-%d", prefix, i)
		data := make([]byte, size)
		rng := rand.New(rand.NewPCG(uint64(i), uint64(size)))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if err := s.Put(t.Context(), key, bytes.NewReader(data), objstore.PutOptions{}); err != nil {
			t.Fatalf("Put(%q): %v", key, err)
		}
		keys = append(keys, key)
		all = append(all, data...)
	}
	return keys, all
}

// assertObject checks that key holds want.
func assertObject(t *testing.T, s objstore.Store, key string, want []byte) {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Get(%q) = %d bytes (sha256 %x), want %d bytes (sha256 %x)", key, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

// proxyBody counts and paces the bytes read through it, as its proxyOptions say.
type proxyBody struct {
	io.ReadCloser
	opts proxyOptions
}

func (b *proxyBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.opts.moved != nil {
		b.opts.moved.Add(int64(n))
	}
	if b.opts.bytesPerSecond > 0 {
		time.Sleep(time.Duration(n) * time.Second / time.Duration(b.opts.bytesPerSecond))
	}
	return n, err
}

// TestObjstoreMemoryStaysFlat streams an object of unknown length several times the part size
// and bounds what the upload allocates in total. minio-go without an explicit PartSize allocates
// a ~528 MiB buffer for such an upload, which this catches (invariant 6).
func TestObjstoreMemoryStaysFlat(t *testing.T) {
	const size = 40 << 20 // 2.5 default parts or chunks; below the emulator's 64 MiB comfort zone
	for _, tc := range defaultStores() {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.new(t)
			if err := s.Ping(t.Context()); err != nil { // connections and clients set up outside the measurement
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := s.Put(t.Context(), "big.log", &pattern{left: size}, objstore.PutOptions{})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("Put of %d MiB of unknown length allocated %d MiB in total", size>>20, allocated>>20)
			// Four default parts or chunks: generous against the HTTP stack, far below one 528 MiB part.
			if limit := uint64(64 << 20); allocated > limit {
				t.Errorf("Put allocated %d MiB, want at most %d MiB: is the part or chunk size explicit?", allocated>>20, limit>>20)
			}
			if info, err := s.Stat(t.Context(), "big.log"); err != nil || info.Size != size {
				t.Errorf("Stat = %+v, %v; want size %d", info, err, size)
			}
		})
	}
}

// TestObjstoreSmallPutsBufferNothing: a Put of bytes already in memory (a capture's segment, a
// manifest) must not allocate a part or chunk buffer (16 MiB by default) on S3 or GCS: that made
// the archiver's memory swing with the number of captures flushing at once.
func TestObjstoreSmallPutsBufferNothing(t *testing.T) {
	for _, tc := range defaultStores() {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.new(t)
			if err := s.Ping(t.Context()); err != nil {
				t.Fatal(err)
			}
			segment := bytes.Repeat([]byte("a compressed segment of a container log\n"), 25_000) // 1 MiB
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := range 4 {
				if err := s.Put(t.Context(), fmt.Sprintf("seg-%d.gz", i), bytes.NewReader(segment), objstore.PutOptions{}); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("4 Puts of %d KiB in memory allocated %d KiB in total", len(segment)>>10, allocated>>10)
			if limit := uint64(16 << 20); allocated > limit {
				t.Errorf("4 Puts of 1 MiB allocated %d MiB, want under %d MiB: a part or chunk buffer per Put?", allocated>>20, limit>>20)
			}
		})
	}
}

// defaultStores are S3 (MinIO) and GCS (the emulator) stores with their default part and chunk
// sizes, for the tests of what a Put allocates.
func defaultStores() []struct {
	name string
	new  func(t *testing.T) objstore.Store
} {
	return []struct {
		name string
		new  func(t *testing.T) objstore.Store
	}{
		{"S3", func(t *testing.T) objstore.Store {
			m := testbed.MinIO(t)
			s, err := objstore.NewS3(objstore.S3Config{Endpoint: m.Endpoint, Bucket: m.Bucket,
				AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true}) // default PartSize
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"GCS", func(t *testing.T) objstore.Store {
			g := testbed.GCS(t)
			t.Setenv("STORAGE_EMULATOR_HOST", g.Host)
			s, err := objstore.NewGCS(t.Context(), objstore.GCSConfig{Bucket: g.Bucket}) // default ChunkSize
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	}
}

// pattern produces left bytes without allocating, so the measurement sees only the store's.
type pattern struct{ left int }

func (p *pattern) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	n := min(len(b), p.left)
	for i := range n {
		b[i] = byte(p.left - i)
	}
	p.left -= n
	return n, nil
}

// TestObjstoreFromFlags configures each backend the way the archiver does, from --store-* flags
// and credential files, and checks that Ping tells a usable store from a misconfigured one.
func TestObjstoreFromFlags(t *testing.T) {
	t.Run("S3", func(t *testing.T) {
		for _, env := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"} {
			t.Setenv(env, "") // only the files count
		}
		m := testbed.MinIO(t)
		dir := t.TempDir()
		access, secret := filepath.Join(dir, "access"), filepath.Join(dir, "secret")
		writeSecret(t, access, m.AccessKey+"\n")
		writeSecret(t, secret, m.SecretKey+"\n")
		args := []string{"--store-backend=s3", "--store-s3-endpoint=" + m.Endpoint, "--store-s3-tls=false",
			"--store-s3-path-style", "--store-s3-access-key-file=" + access, "--store-s3-secret-key-file=" + secret}

		s := storeFromFlags(t, append(args, "--store-s3-bucket="+m.Bucket)...)
		if err := s.Ping(t.Context()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		roundTrip(t, s)

		missing := storeFromFlags(t, append(args, "--store-s3-bucket=no-such-bucket")...)
		if err := missing.Ping(t.Context()); err == nil || !strings.Contains(err.Error(), "bucket does not exist") {
			t.Errorf("Ping of a missing bucket: error = %v, want it to say the bucket does not exist", err)
		}
		writeSecret(t, secret, "wrong-secret")
		denied := storeFromFlags(t, append(args, "--store-s3-bucket="+m.Bucket)...)
		if err := denied.Ping(t.Context()); err == nil {
			t.Error("Ping with a wrong secret key succeeded")
		}
	})
	t.Run("GCS", func(t *testing.T) {
		g := testbed.GCS(t)
		t.Setenv("STORAGE_EMULATOR_HOST", g.Host)
		s := storeFromFlags(t, "--store-backend=gcs", "--store-gcs-bucket="+g.Bucket)
		if err := s.Ping(t.Context()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		roundTrip(t, s)

		missing := storeFromFlags(t, "--store-backend=gcs", "--store-gcs-bucket=no-such-bucket")
		if err := missing.Ping(t.Context()); err == nil {
			t.Error("Ping of a missing bucket succeeded")
		}
	})
}

func storeFromFlags(t *testing.T, args ...string) objstore.Store {
	t.Helper()
	var cfg objstore.Config
	flags := flag.NewFlagSet(t.Name(), flag.ContinueOnError)
	cfg.BindFlags(flags)
	if err := flags.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	s, err := objstore.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New from %q: %v", args, err)
	}
	if c, ok := s.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	return s
}

func writeSecret(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func roundTrip(t *testing.T, s objstore.Store) {
	t.Helper()
	const key = "ns/job/uid/job.json"
	want := []byte(`{"kind":"Job"}`)
	if err := s.Put(t.Context(), key, bytes.NewReader(want), objstore.PutOptions{ContentType: "application/json"}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("Get = %q, %v; want %q", got, err, want)
	}
	if err := s.Delete(t.Context(), key); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if _, err := s.Stat(t.Context(), key); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat after Delete: error = %v, want ErrNotFound", err)
	}
}

// TestObjstoreGCSChecksCRC32C checks that the GCS service itself (here fake-gcs-server) refuses
// an upload whose bytes do not have the CRC32C sent with it, although their sha256 (checked by
// the backend as it sends them) is right: the store checks what it received.
func TestObjstoreGCSChecksCRC32C(t *testing.T) {
	s := newGCSStore(t)
	data := []byte("a log line\n")
	sum := objstore.ChecksumOf(data)
	sum.CRC32C++
	err := s.Put(t.Context(), "checked/crc32c", bytes.NewReader(data), objstore.PutOptions{Checksum: sum})
	if !errors.Is(err, objstore.ErrChecksum) {
		t.Fatalf("Put with a wrong CRC32C: error = %v, want ErrChecksum from the service", err)
	}
	t.Logf("Put with a wrong CRC32C: %v", err)
	if _, err := s.Stat(t.Context(), "checked/crc32c"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat after a refused Put: error = %v, want ErrNotFound", err)
	}
}
