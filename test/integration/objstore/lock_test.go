package objstore

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
	"google.golang.org/api/option"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/testbed"
)

// writeRequest is a request that carries an object's bytes or creates an upload, as the proxy saw it.
type writeRequest struct {
	method, path, query string
	header              http.Header
}

// kind names the S3 operation of a write request.
func (w writeRequest) kind() string {
	switch {
	case w.method == http.MethodPost && strings.Contains(w.query, "uploads"):
		return "CreateMultipartUpload"
	case w.method == http.MethodPost && strings.Contains(w.query, "uploadId"):
		return "CompleteMultipartUpload"
	case w.method == http.MethodPut && strings.Contains(w.query, "partNumber") && w.header.Get("X-Amz-Copy-Source") != "":
		return "UploadPartCopy"
	case w.method == http.MethodPut && strings.Contains(w.query, "partNumber"):
		return "UploadPart"
	case w.method == http.MethodPut:
		return "PutObject"
	}
	return ""
}

// writeRecorder keeps the write requests a proxy passes on, per object key.
type writeRecorder struct {
	mu   sync.Mutex
	reqs []writeRequest
}

func (r *writeRecorder) record(req *http.Request) {
	w := writeRequest{method: req.Method, path: req.URL.Path, query: req.URL.RawQuery, header: req.Header.Clone()}
	if w.kind() == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, w)
}

// take returns, and forgets, the write requests to key in bucket.
func (r *writeRecorder) take(bucket, key string) []writeRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out, rest []writeRequest
	for _, w := range r.reqs {
		if w.path == "/"+bucket+"/"+key {
			out = append(out, w)
		} else {
			rest = append(rest, w)
		}
	}
	r.reqs = rest
	return out
}

// assertLockedWrites checks the write requests of one locked object: the request that creates it
// (PutObject or CreateMultipartUpload) carries the lock mode and retain-until date, and every
// request that carries its bytes (PutObject, UploadPart) a Content-MD5, which AWS requires of
// writes under Object Lock and MinIO does not. wantMD5, if not empty, is that of a PutObject.
func assertLockedWrites(t *testing.T, reqs []writeRequest, until time.Time, wantMD5 string) map[string]int {
	t.Helper()
	kinds := map[string]int{}
	for _, w := range reqs {
		k := w.kind()
		kinds[k]++
		if k == "PutObject" || k == "CreateMultipartUpload" {
			if got := w.header.Get("X-Amz-Object-Lock-Mode"); got != "GOVERNANCE" {
				t.Errorf("%s: X-Amz-Object-Lock-Mode = %q, want GOVERNANCE", k, got)
			}
			got, err := time.Parse(time.RFC3339, w.header.Get("X-Amz-Object-Lock-Retain-Until-Date"))
			if err != nil || !got.Equal(until) {
				t.Errorf("%s: X-Amz-Object-Lock-Retain-Until-Date = %q, want %s", k, w.header.Get("X-Amz-Object-Lock-Retain-Until-Date"), until.Format(time.RFC3339))
			}
		}
		if k == "PutObject" || k == "UploadPart" {
			sum, err := base64.StdEncoding.DecodeString(w.header.Get("Content-Md5"))
			if err != nil || len(sum) != md5.Size {
				t.Errorf("%s %s?%s: Content-MD5 = %q, want the base64 of an MD5 digest", k, w.path, w.query, w.header.Get("Content-Md5"))
			}
			if k == "PutObject" && wantMD5 != "" && w.header.Get("Content-Md5") != wantMD5 {
				t.Errorf("PutObject: Content-MD5 = %q, want %q", w.header.Get("Content-Md5"), wantMD5)
			}
		}
	}
	return kinds
}

func md5Base64(b []byte) string {
	sum := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// TestObjstoreS3ObjectLock proves S3 Object Lock on a MinIO bucket created with it: objects
// stored with a RetainUntil are locked in the store's mode until then, deleting one is refused
// (the store's Delete and a raw DELETE of the version alike), and a Put over it adds a version
// while the locked one stays as it was. A recording proxy between the store and MinIO checks the
// headers AWS requires of locked writes (MinIO accepts them without): Content-MD5 on every
// request carrying the object's bytes, for single PUTs, multipart uploads of unknown length and
// the parts Compose uploads through the client.
func TestObjstoreS3ObjectLock(t *testing.T) {
	ctx := t.Context()
	m := testbed.MinIO(t)
	client, err := testbed.MinIOInstance(t).Client()
	if err != nil {
		t.Fatal(err)
	}
	bucket := m.Bucket + "-lock"
	if err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{ObjectLocking: true}); err != nil {
		t.Fatalf("make bucket with object lock: %v", err)
	}
	rec := &writeRecorder{}
	cfg := objstore.Config{Backend: objstore.BackendS3, LockMode: objstore.LockGovernance, S3: objstore.S3Config{
		Endpoint: proxy(t, m.Endpoint, proxyOptions{record: rec.record}), Bucket: bucket, AccessKey: m.AccessKey, SecretKey: m.SecretKey,
		PathStyle: true, PartSize: objstore.MinPartSize}}
	store, err := objstore.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New with lock mode on a bucket with Object Lock: %v", err)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	locked := objstore.PutOptions{ContentType: "application/json", RetainUntil: until}

	assertRetention := func(t *testing.T, key, version string) {
		t.Helper()
		mode, got, err := client.GetObjectRetention(ctx, bucket, key, version)
		if err != nil || mode == nil || *mode != minio.Governance || got == nil || !got.Equal(until) {
			t.Errorf("retention of %s = %v, %v (%v), want GOVERNANCE until %s", key, mode, got, err, until)
		}
	}
	versions := func(t *testing.T, key string) []minio.ObjectInfo {
		t.Helper()
		var out []minio.ObjectInfo
		for o := range client.ListObjectsIter(ctx, bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
			if o.Err != nil {
				t.Fatalf("list versions of %s: %v", key, o.Err)
			}
			if o.Key == key {
				out = append(out, o)
			}
		}
		return out
	}

	t.Run("start-up refuses a bucket without Object Lock", func(t *testing.T) {
		plain := cfg
		plain.S3.Bucket = m.Bucket
		_, err := objstore.New(ctx, plain)
		if err == nil || !strings.Contains(err.Error(), "does not have Object Lock enabled") {
			t.Errorf("New with lock mode on a bucket without Object Lock = %v, want an error saying so", err)
		}
	})

	t.Run("locked object refuses deletion and keeps its version when overwritten", func(t *testing.T) {
		key, data := "ns/job/uid/job.json", []byte(`{"kind":"Job"}`)
		if err := store.Put(ctx, key, bytes.NewReader(data), locked); err != nil {
			t.Fatalf("Put locked: %v", err)
		}
		kinds := assertLockedWrites(t, rec.take(bucket, key), until, md5Base64(data))
		if kinds["PutObject"] != 1 {
			t.Errorf("write requests = %v, want one PutObject", kinds)
		}
		assertRetention(t, key, "")
		first := versions(t, key)
		if len(first) != 1 {
			t.Fatalf("versions of %s = %d, want 1", key, len(first))
		}

		if err := store.Delete(ctx, key); !errors.Is(err, objstore.ErrLocked) {
			t.Errorf("Delete of a locked object = %v, want ErrLocked", err)
		}
		err := client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{VersionID: first[0].VersionID})
		if err == nil {
			t.Errorf("raw DELETE of the locked version succeeded")
		}
		assertObject(t, store, key, data)

		// S3 keeps versions: the overwrite is a new version, the locked one is untouched.
		if err := store.Put(ctx, key, strings.NewReader(`{"forged":true}`), locked); err != nil {
			t.Fatalf("Put over a locked key: %v", err)
		}
		rec.take(bucket, key)
		obj, err := client.GetObject(ctx, bucket, key, minio.GetObjectOptions{VersionID: first[0].VersionID})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(obj)
		obj.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("locked version after an overwrite = %q (%v), want %q", got, err, data)
		}
		assertRetention(t, key, first[0].VersionID)
		if err := store.Delete(ctx, key); !errors.Is(err, objstore.ErrLocked) {
			t.Errorf("Delete after the overwrite = %v, want ErrLocked", err)
		}
	})

	t.Run("upload of unknown length sends Content-MD5 with every part", func(t *testing.T) {
		key := "ns/job/uid/pods/p/u/main.log.gz"
		data := bytes.Repeat([]byte("0123456789abcdef"), (2*objstore.MinPartSize+1000)/16)
		pr, pw := io.Pipe()
		go func() { _, err := pw.Write(data); pw.CloseWithError(err) }()
		if err := store.Put(ctx, key, pr, locked); err != nil {
			t.Fatalf("Put locked of unknown length: %v", err)
		}
		kinds := assertLockedWrites(t, rec.take(bucket, key), until, "")
		if kinds["CreateMultipartUpload"] != 1 || kinds["UploadPart"] != 3 {
			t.Errorf("write requests = %v, want one CreateMultipartUpload and 3 UploadPart", kinds)
		}
		assertRetention(t, key, "")
		assertObject(t, store, key, data)
		if err := store.Delete(ctx, key); !errors.Is(err, objstore.ErrLocked) {
			t.Errorf("Delete of a locked object = %v, want ErrLocked", err)
		}
	})

	t.Run("compose locks the object and sends Content-MD5 with the parts it uploads", func(t *testing.T) {
		dst := "ns/job/uid/pods/p/u/sidecar.log.gz"
		srcs, want := putSources(t, store, "segments", []int{2 << 20, 3 << 20, objstore.MinPartSize + 1, 1000})
		if err := store.Compose(ctx, dst, srcs, locked); err != nil {
			t.Fatalf("Compose locked: %v", err)
		}
		kinds := assertLockedWrites(t, rec.take(bucket, dst), until, "")
		if kinds["CreateMultipartUpload"] != 1 || kinds["UploadPart"] < 1 || kinds["UploadPartCopy"] < 1 {
			t.Errorf("write requests = %v, want one CreateMultipartUpload, parts uploaded and copied", kinds)
		}
		assertRetention(t, dst, "")
		assertObject(t, store, dst, want)
		if err := store.Delete(ctx, dst); !errors.Is(err, objstore.ErrLocked) {
			t.Errorf("Delete of a locked object = %v, want ErrLocked", err)
		}
		// The sources are not locked: deleting them leaves no version behind (a plain DELETE in
		// a versioned bucket would only add a delete marker).
		for _, src := range srcs {
			if err := store.Delete(ctx, src); err != nil {
				t.Errorf("Delete of unlocked source %s: %v", src, err)
			}
			if v := versions(t, src); len(v) != 0 {
				t.Errorf("%d versions of deleted source %s left", len(v), src)
			}
		}
	})

	t.Run("compose of empty sources is a locked empty PUT", func(t *testing.T) {
		dst := "ns/job/uid/pods/p/u/empty.log.gz"
		srcs, _ := putSources(t, store, "empty", []int{0, 0})
		if err := store.Compose(ctx, dst, srcs, locked); err != nil {
			t.Fatalf("Compose locked: %v", err)
		}
		if kinds := assertLockedWrites(t, rec.take(bucket, dst), until, md5Base64(nil)); kinds["PutObject"] != 1 {
			t.Errorf("write requests = %v, want one PutObject", kinds)
		}
		assertRetention(t, dst, "")
	})

	t.Run("objects without RetainUntil are not locked", func(t *testing.T) {
		key := "segments/unlocked"
		if err := store.Put(ctx, key, strings.NewReader("segment"), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, w := range rec.take(bucket, key) {
			if w.header.Get("X-Amz-Object-Lock-Mode") != "" {
				t.Errorf("%s of an unlocked object has X-Amz-Object-Lock-Mode %q", w.kind(), w.header.Get("X-Amz-Object-Lock-Mode"))
			}
		}
		if err := store.Delete(ctx, key); err != nil {
			t.Errorf("Delete of an unlocked object: %v", err)
		}
		if v := versions(t, key); len(v) != 0 {
			t.Errorf("%d versions of deleted %s left", len(v), key)
		}
	})
}

// TestObjstoreGCSRetention checks that the GCS backend stores locked objects with an object
// retention in the store's mode (governance: Unlocked, compliance: Locked), by Put and by
// Compose, and unlocked ones without. fake-gcs-server v1.56.1 keeps and reports an object's
// retention but never enforces it (it deletes and replaces retained objects) and has no
// per-object holds, so refusal is proved on MinIO (TestObjstoreS3ObjectLock) and the fs backend
// only.
func TestObjstoreGCSRetention(t *testing.T) {
	ctx := t.Context()
	g := testbed.GCS(t)
	t.Setenv("STORAGE_EMULATOR_HOST", g.Host)
	client, err := storage.NewClient(ctx, option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	bucket := client.Bucket(g.Bucket)
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	for _, tc := range []struct{ mode, want string }{{objstore.LockGovernance, "Unlocked"}, {objstore.LockCompliance, "Locked"}} {
		t.Run(tc.mode, func(t *testing.T) {
			s, err := objstore.NewGCS(ctx, objstore.GCSConfig{Bucket: g.Bucket, LockMode: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			locked := objstore.PutOptions{RetainUntil: until.Add(-time.Millisecond)} // rounded up to the second
			put := tc.mode + "/job.json"
			if err := s.Put(ctx, put, strings.NewReader("{}"), locked); err != nil {
				t.Fatal(err)
			}
			srcs, _ := putSources(t, s, tc.mode+"/seg", []int{10, 20})
			composed := tc.mode + "/main.log.gz"
			if err := s.Compose(ctx, composed, srcs, locked); err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{put, composed} {
				attrs, err := bucket.Object(key).Attrs(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if r := attrs.Retention; r == nil || r.Mode != tc.want || !r.RetainUntil.Equal(until) {
					t.Errorf("retention of %s = %+v, want %s until %s", key, r, tc.want, until)
				}
			}
			attrs, err := bucket.Object(srcs[0]).Attrs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if attrs.Retention != nil {
				t.Errorf("retention of unlocked %s = %+v, want none", srcs[0], attrs.Retention)
			}
		})
	}
}
