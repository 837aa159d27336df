package testbed

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIOServer is a MinIO server on 127.0.0.1.
type MinIOServer struct {
	Endpoint             string // host:port
	AccessKey, SecretKey string
	Proc                 *Process
	restart              func() error
}

// S3 locates a fresh bucket on the testbed's MinIO.
type S3 struct {
	Endpoint             string // host:port, plain HTTP
	AccessKey, SecretKey string
	Bucket               string
}

// GCSServer locates a fresh bucket on the testbed's fake-gcs-server.
type GCSServer struct {
	Endpoint string // http://127.0.0.1:PORT
	Host     string // 127.0.0.1:PORT, the value for STORAGE_EMULATOR_HOST
	Bucket   string
	Proc     *Process
}

var (
	minioOnce   once[*MinIOServer]
	gcsOnce     once[*GCSServer]
	bucketCount atomic.Int64
)

func bucketName(t T) string {
	return fmt.Sprintf("b%d-%s", bucketCount.Add(1), sanitize(t.Name(), 40))
}

// MinIOInstance returns the shared MinIO server, starting it on first use.
func MinIOInstance(t T) *MinIOServer {
	t.Helper()
	s, err := minioOnce.get("MinIO", startMinIO)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// MinIO returns a new, empty bucket on the shared MinIO server.
func MinIO(t T) S3 {
	t.Helper()
	s := MinIOInstance(t)
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	b := bucketName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, b, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("testbed minio: make bucket %s: %v (log: %s)", b, err, s.Proc.LogPath)
	}
	return S3{Endpoint: s.Endpoint, AccessKey: s.AccessKey, SecretKey: s.SecretKey, Bucket: b}
}

// Client returns a minio-go client with the root credentials.
func (s *MinIOServer) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
}

func startMinIO() (*MinIOServer, error) {
	bin, err := Binary("minio", "MINIO_VERSION")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	console, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(WorkDir(), "minio")
	s := &MinIOServer{Endpoint: "127.0.0.1:" + strconv.Itoa(port), AccessKey: "testbed", SecretKey: "testbed-secret-key"}
	s.restart = func() error {
		cmd := exec.Command(bin, "server", dir, "--address", s.Endpoint, "--console-address", "127.0.0.1:"+strconv.Itoa(console), "--quiet")
		cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
			"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1",
			// Its metrics without a token: benchmarks count its requests by API (issue 28).
			"MINIO_PROMETHEUS_AUTH_TYPE=public")
		p, err := startProcess("minio", cmd)
		if err != nil {
			return err
		}
		onStop(p.Stop)
		s.Proc = p
		return p.waitFor(60*time.Second, httpOK("http://"+s.Endpoint+"/minio/health/ready"))
	}
	return s, s.restart()
}

// Stop stops the shared MinIO server (outage tests); Start brings it back on the same address
// with the same data.
func (s *MinIOServer) Stop() { s.Proc.Stop() }

// Start restarts a stopped MinIO server.
func (s *MinIOServer) Start(t T) {
	t.Helper()
	if err := s.restart(); err != nil {
		t.Fatal(err)
	}
}

// httpOK is a readiness check: url answers 200.
func httpOK(url string) func() error {
	return getOK(&http.Client{Timeout: time.Second}, url)
}

// getOK is a readiness check: c's GET of url answers 200.
func getOK(c *http.Client, url string) func() error {
	return func() error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// GCS returns a new, empty bucket on the shared GCS emulator.
func GCS(t T) GCSServer {
	t.Helper()
	s, err := gcsOnce.get("GCS emulator", startGCS)
	if err != nil {
		t.Fatal(err)
	}
	b := bucketName(t)
	body := fmt.Sprintf(`{"name":%q}`, b)
	resp, err := http.Post(s.Endpoint+"/storage/v1/b?project=testbed", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatalf("testbed gcs: create bucket %s: %v (log: %s)", b, err, s.Proc.LogPath)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("testbed gcs: create bucket %s: %s (log: %s)", b, resp.Status, s.Proc.LogPath)
	}
	g := *s
	g.Bucket = b
	return g
}

func startGCS() (*GCSServer, error) {
	bin, err := Binary("fake-gcs-server", "FAKE_GCS_VERSION")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(WorkDir(), "gcs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	host := "127.0.0.1:" + strconv.Itoa(port)
	s := &GCSServer{Endpoint: "http://" + host, Host: host}
	// Defaults are 0.0.0.0 and https; without -public-host the Go client's reads fail.
	cmd := exec.Command(bin, "-scheme", "http", "-host", "127.0.0.1", "-port", strconv.Itoa(port),
		"-backend", "filesystem", "-filesystem-root", dir, "-external-url", s.Endpoint, "-public-host", host,
		"-log-level", "warn")
	p, err := startProcess("fake-gcs-server", cmd)
	if err != nil {
		return nil, err
	}
	onStop(p.Stop)
	s.Proc = p
	return s, p.waitFor(30*time.Second, httpOK(s.Endpoint+"/storage/v1/b?project=testbed"))
}
