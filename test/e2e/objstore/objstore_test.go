package objstore

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/objstore/objstoretest"
	"github.com/jobvault/jobvault/test/testbed"
)

// The filesystem backend runs the same conformance suite in pkg/objstore's unit tests.

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
	return s
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
	return s
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
