package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/certs/certgen"
	"github.com/jobvault/jobvault/pkg/admission"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/testbed"
)

var webhookOnce sync.Once

// registerWebhook serves jobvault's admission webhook in this process on 127.0.0.1 and registers it
// cluster-wide with the MutatingWebhookConfiguration of config/webhook, its clientConfig pointed at
// that address. Once per test binary: the registration is cluster-wide.
func registerWebhook(t testing.TB, env *testbed.Env) {
	t.Helper()
	var err error
	webhookOnce.Do(func() { err = startWebhook(env) })
	if err != nil {
		t.Fatalf("start webhook: %v", err)
	}
}

func startWebhook(env *testbed.Env) error {
	dir, err := os.MkdirTemp(testbed.WorkDir(), "webhook-certs-")
	if err != nil {
		return err
	}
	bundle, err := certgen.Generate(certgen.Options{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		return err
	}
	if err := bundle.WriteDir(dir); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	if err := admission.Register(srv, clock.RealClock{}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = srv.Start(ctx) }()
	// Stopped with the process; the cluster goes with it.
	_ = cancel

	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "webhook", "mutatingwebhookconfiguration.yaml"))
	if err != nil {
		return err
	}
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		return fmt.Errorf("parse config/webhook's MutatingWebhookConfiguration: %w", err)
	}
	cfg.Name = "jobvault-e2e"
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		url := "https://127.0.0.1:" + strconv.Itoa(port) + *w.ClientConfig.Service.Path
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: bundle.CACert}
	}
	deadline := time.Now().Add(30 * time.Second)
	for srv.StartedChecker()(nil) != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("webhook server on 127.0.0.1:%d did not start", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := env.Client.Create(context.Background(), &cfg); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// stack is one archiver process with its own database and bucket, archiving one namespace.
type stack struct {
	env     *testbed.Env
	ns      string
	dsn     string
	records *db.DB
	store   objstore.Store
	args    []string
	envv    []string
	proc    *testbed.Process
	probe   int
}

// newStack registers the webhook, makes a namespace, a database and a store of the given backend
// (s3 = MinIO, gcs = the GCS emulator, fs = a directory) and starts the archiver binary for them.
func newStack(t testing.TB, backend string, flags ...string) *stack {
	t.Helper()
	env := testbed.Cluster(t)
	registerWebhook(t, env)
	s := &stack{env: env, ns: env.Namespace(t), dsn: testbed.Postgres(t)}
	cfg := objstore.Config{Backend: backend}
	switch backend {
	case objstore.BackendS3:
		m := testbed.MinIO(t)
		cfg.S3 = objstore.S3Config{Endpoint: m.Endpoint, Bucket: m.Bucket, AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true}
		s.args = []string{"--store-backend=s3", "--store-s3-endpoint=" + m.Endpoint, "--store-s3-bucket=" + m.Bucket,
			"--store-s3-tls=false", "--store-s3-path-style"}
		s.envv = []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey}
	case objstore.BackendGCS:
		g := testbed.GCS(t)
		t.Setenv("STORAGE_EMULATOR_HOST", g.Host)
		cfg.GCS = objstore.GCSConfig{Bucket: g.Bucket}
		s.args = []string{"--store-backend=gcs", "--store-gcs-bucket=" + g.Bucket}
		s.envv = []string{"STORAGE_EMULATOR_HOST=" + g.Host}
	default:
		cfg.FSRoot = t.TempDir()
		s.args = []string{"--store-backend=fs", "--store-fs-root=" + cfg.FSRoot}
	}
	cfg.Prefix = "archive"
	s.args = append(s.args, "--store-prefix=archive")
	var err error
	if s.store, err = objstore.New(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	s.args = append(s.args, flags...)
	s.start(t)
	if s.records, err = db.Open(context.Background(), s.dsn, db.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.records.Close() })
	return s
}

// start runs the archiver binary; stop or kill it with s.proc.
func (s *stack) start(t testing.TB) {
	t.Helper()
	bin := testbed.GoBuild(t, "./archiver")
	s.probe = testbed.FreePort(t)
	args := append([]string{"--kubeconfig=" + s.env.KubeconfigPath, "--db-dsn=" + s.dsn, "--leader-elect=false",
		"--namespaces=" + s.ns, "--metrics-bind-address=127.0.0.1:" + strconv.Itoa(testbed.FreePort(t)),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(s.probe)}, s.args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), s.envv...)
	s.proc = testbed.Start(t, "archiver", cmd)
	s.proc.WaitReady(t, "http://127.0.0.1:"+strconv.Itoa(s.probe)+"/readyz", time.Minute)
}

// waitArchived waits until the job's finalizer is released and returns the job as last seen.
func (s *stack) waitArchived(t testing.TB, job *batchv1alpha1.Job, timeout time.Duration) *batchv1alpha1.Job {
	t.Helper()
	var j batchv1alpha1.Job
	deadline := time.Now().Add(timeout)
	for {
		err := s.env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &j)
		if err == nil && j.Annotations[tracking.ArchivedAtAnnotation] != "" && !controllerutil.ContainsFinalizer(&j, tracking.JobFinalizer) {
			return &j
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s/%s not archived within %s (phase %q, finalizers %v, err %v); archiver log: %s",
				job.Namespace, job.Name, timeout, j.Status.State.Phase, j.Finalizers, err, s.proc.LogPath)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readLog reads an archived log object back, decompressed, with its sha256.
func (s *stack) readLog(t testing.TB, key string) ([]byte, string) {
	t.Helper()
	rc, err := s.store.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatalf("gunzip %s: %v", key, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// checkLog asserts that the log object row is stored and its object holds exactly want.
func (s *stack) checkLog(t testing.TB, row db.LogObject, want []byte) {
	t.Helper()
	if row.State != db.LogStored {
		t.Errorf("log %s: state %s (%s), want stored", row, row.State, row.Reason)
		return
	}
	got, sum := s.readLog(t, row.ObjectKey)
	wantSum := sha256.Sum256(want)
	if !bytes.Equal(got, want) || sum != hex.EncodeToString(wantSum[:]) || row.SHA256 != sum || row.Bytes != int64(len(want)) {
		t.Errorf("log %s at %s: got %d bytes sha256 %s (row: %d bytes, %s), want %d bytes sha256 %x",
			row, row.ObjectKey, len(got), sum, row.Bytes, row.SHA256, len(want), wantSum)
	}
}
