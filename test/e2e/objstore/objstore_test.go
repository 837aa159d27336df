package objstore

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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

// TestObjstoreS3ComposeCopiesServerSide checks where S3 composes: sources of at least the
// smallest part size but the last are copied by the service, their bytes never passing through
// the client, and other sources are streamed through it.
func TestObjstoreS3ComposeCopiesServerSide(t *testing.T) {
	m := testbed.MinIO(t)
	var moved atomic.Int64
	direct := newS3Store(t, m, m.Endpoint)
	proxied := newS3Store(t, m, s3Proxy(t, m, &moved, nil))
	for _, tc := range []struct {
		name       string
		sizes      []int
		serverSide bool
	}{
		{"each but the last at least 5 MiB", []int{objstore.MinPartSize, objstore.MinPartSize, 1000}, true},
		{"a small source first", []int{1000, objstore.MinPartSize}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := strings.ReplaceAll(tc.name, " ", "-")
			srcs, total := putSources(t, direct, dst, tc.sizes)
			moved.Store(0)
			if err := proxied.Compose(t.Context(), dst, srcs, objstore.PutOptions{ContentType: "text/plain"}); err != nil {
				t.Fatalf("Compose: %v", err)
			}
			t.Logf("Compose of %d bytes moved %d bytes through the client", total, moved.Load())
			if tc.serverSide && moved.Load() > 64<<10 {
				t.Errorf("Compose moved %d bytes through the client, want a few requests' worth: copied server-side", moved.Load())
			}
			if !tc.serverSide && moved.Load() < 2*total {
				t.Errorf("Compose moved %d bytes through the client, want every byte down and up again (%d)", moved.Load(), 2*total)
			}
			if info, err := direct.Stat(t.Context(), dst); err != nil || info.Size != total {
				t.Errorf("Stat = %+v, %v; want size %d", info, err, total)
			}
		})
	}
}

// TestObjstoreS3FailedComposeLeavesNoUpload fails the server-side copy of the second source: the
// Compose must fail and abort its multipart upload, leaving neither an object nor parts behind.
func TestObjstoreS3FailedComposeLeavesNoUpload(t *testing.T) {
	m := testbed.MinIO(t)
	var moved atomic.Int64
	direct := newS3Store(t, m, m.Endpoint)
	proxied := newS3Store(t, m, s3Proxy(t, m, &moved, func(r *http.Request) bool {
		return r.Header.Get("X-Amz-Copy-Source") != "" && r.URL.Query().Get("partNumber") == "2"
	}))
	const dst = "composed"
	srcs, _ := putSources(t, direct, dst, []int{objstore.MinPartSize, objstore.MinPartSize, 1000})
	err := proxied.Compose(t.Context(), dst, srcs, objstore.PutOptions{})
	if err == nil {
		t.Fatal("Compose succeeded although copying a part failed")
	}
	t.Logf("Compose error (expected): %v", err)
	if _, err := direct.Stat(t.Context(), dst); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat after failed Compose: error = %v, want ErrNotFound", err)
	}
	client, err := testbed.MinIOInstance(t).Client()
	if err != nil {
		t.Fatal(err)
	}
	for u := range client.ListIncompleteUploads(t.Context(), m.Bucket, dst, true) {
		t.Errorf("upload left behind: %+v", u)
	}
}

func newS3Store(t *testing.T, m testbed.S3, endpoint string) objstore.Store {
	t.Helper()
	s, err := objstore.NewS3(objstore.S3Config{Endpoint: endpoint, Bucket: m.Bucket,
		AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true, PartSize: objstore.MinPartSize})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// s3Proxy returns the address of a proxy to m that adds the bytes of every request and response
// body to moved, and answers the requests fail selects with an S3 error that is not retried. The
// Host header passes unchanged, so request signatures made for the proxy's address still match.
func s3Proxy(t *testing.T, m testbed.S3, moved *atomic.Int64, fail func(*http.Request) bool) string {
	t.Helper()
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: m.Endpoint})
	proxy.ModifyResponse = func(resp *http.Response) error {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: moved}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail != nil && fail(r) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>failed by the test</Message></Error>`)
			return
		}
		r.Body = &countingBody{ReadCloser: r.Body, n: moved}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// putSources stores objects of sizes under prefix, and returns their keys and total size.
func putSources(t *testing.T, s objstore.Store, prefix string, sizes []int) ([]string, int64) {
	t.Helper()
	var keys []string
	var total int64
	for i, size := range sizes {
		key := fmt.Sprintf("%s/seg-%d", prefix, i)
		if err := s.Put(t.Context(), key, &pattern{left: size}, objstore.PutOptions{}); err != nil {
			t.Fatalf("Put(%q): %v", key, err)
		}
		keys = append(keys, key)
		total += int64(size)
	}
	return keys, total
}

// countingBody adds the bytes read through it to n.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestObjstoreMemoryStaysFlat streams an object of unknown length several times the part size
// and bounds what the upload allocates in total. minio-go without an explicit PartSize allocates
// a ~528 MiB buffer for such an upload, which this catches (invariant 6).
func TestObjstoreMemoryStaysFlat(t *testing.T) {
	const size = 40 << 20 // 2.5 default parts or chunks; below the emulator's 64 MiB comfort zone
	for _, tc := range []struct {
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
	} {
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
