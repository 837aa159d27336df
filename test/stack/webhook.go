package stack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	utilptr "k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/certs/certgen"
	"github.com/jobvault/jobvault/pkg/admission"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/testbed"
)

// The webhook runs in one of two ways, both registered with config/webhook's
// MutatingWebhookConfiguration (WebhookConfiguration):
//   - Webhook: the real binary, once per process, registered cluster-wide, as in a cluster. The
//     demo and the archiver suites run behind it.
//   - ServeWebhook: a server in this process per test (a manager with admission.SetupWithManager,
//     as the binary does), registered for the test's namespaces only, so that no other test is
//     affected. Tests rotate its certificates, change its registration and add handlers to it.

// WebhookConfigName is the name under which the stack registers the webhook.
const WebhookConfigName = "jobvault-testbed"

var (
	webhookMu   sync.Mutex
	webhookProc *testbed.Process
	// webhookMetricsAddr is where Webhook's binary serves /metrics.
	webhookMetricsAddr string
)

// Webhook runs the webhook binary on 127.0.0.1 with a freshly minted CA and serving certificate and
// registers it cluster-wide with config/webhook's MutatingWebhookConfiguration, its clientConfig
// pointed at that address. Once per process: the registration is cluster-wide.
func Webhook(t testbed.T, env *testbed.Env) *testbed.Process {
	t.Helper()
	webhookMu.Lock()
	defer webhookMu.Unlock()
	if webhookProc != nil {
		return webhookProc
	}
	dir, err := os.MkdirTemp(testbed.WorkDir(), "webhook-certs-")
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := certgen.Generate(certgen.Options{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bundle.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	port, probe := testbed.FreePort(t), testbed.FreePort(t)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(testbed.FreePort(t))
	cmd := exec.Command(testbed.GoBuild(t, "./webhook"), "--kubeconfig="+env.KubeconfigPath, "--cert-dir="+dir, "--bind-address=127.0.0.1",
		"--port="+strconv.Itoa(port), "--metrics-bind-address="+metricsAddr, "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probe))
	p := testbed.StartShared(t, "webhook", cmd)
	p.WaitReady(t, "http://127.0.0.1:"+strconv.Itoa(probe)+"/readyz", time.Minute)

	cfg, err := WebhookConfiguration("https://127.0.0.1:"+strconv.Itoa(port), bundle.CACert)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(context.Background(), cfg); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("register webhook: %v", err)
	}
	webhookProc, webhookMetricsAddr = p, metricsAddr
	return p
}

// WebhookMetrics returns what the /metrics of Webhook's binary serves. Webhook must have been
// started.
func WebhookMetrics(t testbed.T) string {
	t.Helper()
	webhookMu.Lock()
	addr := webhookMetricsAddr
	webhookMu.Unlock()
	if addr == "" {
		t.Fatalf("webhook metrics: the webhook binary was not started (stack.Webhook)")
	}
	return scrape(t, "webhook", addr)
}

// CreateWhileJobWebhookDown creates job as user while the VcJob webhook of Webhook's registration
// cannot be reached, as in an outage: the API server fails open (failurePolicy Ignore) and admits
// the job without our finalizer, labels or submitter. The pod webhook stays up, and the VcJob
// webhook is back when this returns. Webhook must have been started.
func CreateWhileJobWebhookDown(t testing.TB, env *testbed.Env, user string, job *batchv1alpha1.Job) {
	t.Helper()
	down := "https://127.0.0.1:" + strconv.Itoa(testbed.FreePort(t)) + admission.JobPath // nothing listens there
	up := setJobWebhookURL(t, env, down)
	waitJobWebhook(t, env, job, false)
	defer func() {
		setJobWebhookURL(t, env, up)
		waitJobWebhook(t, env, job, true)
	}()
	CreateAs(t, env, user, job)
}

// setJobWebhookURL points the VcJob webhook of Webhook's registration at url and returns the URL
// it had.
func setJobWebhookURL(t testing.TB, env *testbed.Env, url string) string {
	t.Helper()
	ctx := context.Background()
	for {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := env.Client.Get(ctx, client.ObjectKey{Name: WebhookConfigName}, &cfg); err != nil {
			t.Fatalf("read the webhook registration: %v", err)
		}
		var old string
		for i := range cfg.Webhooks {
			if cc := &cfg.Webhooks[i].ClientConfig; cc.URL != nil && strings.HasSuffix(*cc.URL, admission.JobPath) {
				old, cc.URL = *cc.URL, &url
			}
		}
		if old == "" {
			t.Fatalf("webhook registration %s has no VcJob webhook", WebhookConfigName)
		}
		err := env.Client.Update(ctx, &cfg)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatalf("update the webhook registration: %v", err)
		}
		return old
	}
}

// waitJobWebhook waits until a dry-run create of a copy of job comes back stamped by the VcJob
// webhook, or not: the API server picks up a changed registration a moment after it is stored.
func waitJobWebhook(t testing.TB, env *testbed.Env, job *batchv1alpha1.Job, stamped bool) {
	t.Helper()
	var got bool
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			probe := job.DeepCopy()
			probe.Name, probe.GenerateName, probe.ResourceVersion = "", "webhook-probe-", ""
			// Stamped means our finalizer came from the webhook, not from a job that carries it.
			probe.Finalizers = slices.DeleteFunc(slices.Clone(probe.Finalizers), func(f string) bool { return f == tracking.JobFinalizer })
			if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
				return false, err
			}
			got = slices.Contains(probe.Finalizers, tracking.JobFinalizer)
			return got == stamped, nil
		})
	if err != nil {
		t.Fatalf("VcJob webhook: dry-run VcJobs stamped %v, want %v: %v", got, stamped, err)
	}
}

// WebhookConfiguration reads config/webhook's MutatingWebhookConfiguration and points both of its
// webhooks at baseURL (plus each one's path), trusting caBundle.
func WebhookConfiguration(baseURL string, caBundle []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	raw, err := os.ReadFile(filepath.Join(testbed.ModuleRoot(), "config", "webhook", "mutatingwebhookconfiguration.yaml"))
	if err != nil {
		return nil, err
	}
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		return nil, fmt.Errorf("parse config/webhook's MutatingWebhookConfiguration: %w", err)
	}
	cfg.Name = WebhookConfigName
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		url := baseURL + *w.ClientConfig.Service.Path
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
	}
	return &cfg, nil
}

// ProbeLabel selects the probe ConfigMaps of WebhookRegistration.wait.
const ProbeLabel = "e2e.jobvault.io/probe"

// WebhookServer is a webhook served in this process.
type WebhookServer struct {
	// Addr is 127.0.0.1:port.
	Addr string
	// CA issues the serving certificate; a test that rotates to a new CA sets it.
	CA *certgen.CA
	// Server serves admission.Register's paths; a test may add its own.
	Server  webhook.Server
	certDir string
}

// ServeWebhook serves the webhook in this process until the test ends.
func ServeWebhook(tb testing.TB, env *testbed.Env) *WebhookServer {
	tb.Helper()
	ca, err := certgen.NewCA("jobvault-e2e-ca", time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	s := &WebhookServer{certDir: tb.TempDir(), CA: ca}
	s.Rotate(tb, ca)

	port := testbed.FreePort(tb)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(admission.ServerOptions("127.0.0.1", port, s.certDir, false)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := admission.SetupWithManager(mgr); err != nil {
		tb.Fatal(err)
	}
	s.Server = mgr.GetWebhookServer()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("webhook manager: %v", err)
		}
	})
	ready := mgr.GetWebhookServer().StartedChecker()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return ready(nil) == nil, nil }); err != nil {
		tb.Fatalf("webhook server on %s did not start: %v", s.Addr, err)
	}
	return s
}

// Rotate writes a new serving certificate issued by ca into the certificate directory.
func (s *WebhookServer) Rotate(tb testing.TB, ca *certgen.CA) *x509.Certificate {
	tb.Helper()
	b, err := ca.Issue(certgen.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.WriteDir(s.certDir); err != nil {
		tb.Fatal(err)
	}
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		tb.Fatal(err)
	}
	return cert
}

// servedSerial is the serial number of the certificate the server presents now.
func (s *WebhookServer) servedSerial() (*big.Int, error) {
	conn, err := tls.Dial("tcp", s.Addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only reads the certificate
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// WaitServes waits until the server presents cert: the hot reload under test.
func (s *WebhookServer) WaitServes(tb testing.TB, cert *x509.Certificate) time.Duration {
	tb.Helper()
	start := time.Now()
	// certwatcher reacts to file events at once and polls every 10 s as a fallback.
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			serial, err := s.servedSerial()
			return err == nil && serial.Cmp(cert.SerialNumber) == 0, nil
		})
	if err != nil {
		tb.Fatalf("the server did not switch to the rotated certificate: %v", err)
	}
	return time.Since(start)
}

// HTTPClient trusts only the server's CA.
func (s *WebhookServer) HTTPClient(tb testing.TB) *http.Client {
	tb.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.CA.CertPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// WebhookRegistration is config/webhook's MutatingWebhookConfiguration registered for one test.
type WebhookRegistration struct {
	env        *testbed.Env
	name       string
	namespaces []string
	generation int
}

// Register registers WebhookConfiguration, pointed at s, for the given namespaces only, and waits
// until the API server calls it. tweak, if set, adjusts the webhooks (e.g. failurePolicy).
func (s *WebhookServer) Register(tb testing.TB, env *testbed.Env, namespaces []string, tweak func(*admissionregistrationv1.MutatingWebhook)) *WebhookRegistration {
	tb.Helper()
	return s.RegisterAs(tb, env, "jobvault-webhook-e2e-", namespaces, tweak)
}

// RegisterAs is Register under a configuration name that starts with prefix. The API server calls
// mutating webhooks in the order of their configurations' names: "jobvault-…" runs before
// Volcano's ("volcano-admission-service-…"), "zz-…" after.
func (s *WebhookServer) RegisterAs(tb testing.TB, env *testbed.Env, prefix string, namespaces []string, tweak func(*admissionregistrationv1.MutatingWebhook)) *WebhookRegistration {
	tb.Helper()
	cfg, err := WebhookConfiguration("https://"+s.Addr, s.CA.CertPEM)
	if err != nil {
		tb.Fatal(err)
	}
	r := &WebhookRegistration{env: env, name: prefix + rand.String(6), namespaces: namespaces}
	cfg.ObjectMeta = metav1.ObjectMeta{Name: r.name}
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		// Keep config/webhook's exclusions and add: only this test's namespaces.
		w.NamespaceSelector.MatchExpressions = append(w.NamespaceSelector.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces,
		})
		if tweak != nil {
			tweak(w)
		}
	}
	// The probe: a webhook on ConfigMaps carrying this registration's current probe label, sent
	// to the pod path, which answers anything but a pod with a 400. A dry-run ConfigMap denied
	// with that label proves that the API server runs this version of the configuration.
	probe := cfg.Webhooks[len(cfg.Webhooks)-1].DeepCopy()
	probe.Name = "probe.e2e.jobvault.io"
	probe.ClientConfig.URL = utilptr.To("https://" + s.Addr + admission.PodPath)
	probe.FailurePolicy = utilptr.To(admissionregistrationv1.Fail)
	probe.Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	probe.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{ProbeLabel: r.probeValue()}}
	cfg.Webhooks = append(cfg.Webhooks, *probe)

	if err := env.Client.Create(context.Background(), cfg); err != nil {
		tb.Fatalf("register the webhook: %v", err)
	}
	tb.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), cfg); client.IgnoreNotFound(err) != nil {
			tb.Errorf("unregister the webhook: %v", err)
		}
	})
	r.wait(tb)
	return r
}

func (r *WebhookRegistration) probeValue() string { return r.name + "-" + strconv.Itoa(r.generation) }

// Update changes the registered configuration and waits until the API server uses the change.
func (r *WebhookRegistration) Update(tb testing.TB, change func(*admissionregistrationv1.MutatingWebhookConfiguration)) {
	tb.Helper()
	r.generation++
	ctx := context.Background()
	for {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := r.env.Client.Get(ctx, client.ObjectKey{Name: r.name}, &cfg); err != nil {
			tb.Fatal(err)
		}
		change(&cfg)
		probe := &cfg.Webhooks[len(cfg.Webhooks)-1]
		probe.ObjectSelector.MatchLabels[ProbeLabel] = r.probeValue()
		err := r.env.Client.Update(ctx, &cfg)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			tb.Fatalf("update the webhook configuration: %v", err)
		}
		break
	}
	r.wait(tb)
}

// wait polls with dry-run ConfigMaps until the probe of the current generation denies one.
func (r *WebhookRegistration) wait(tb testing.TB) {
	tb.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				GenerateName: "probe-", Namespace: r.namespaces[0], Labels: map[string]string{ProbeLabel: r.probeValue()},
			}}
			err := r.env.Client.Create(ctx, cm, client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "admits only v1/pods"), nil
		})
	if err != nil {
		tb.Fatalf("the API server did not pick up webhook configuration %s generation %d: %v", r.name, r.generation, err)
	}
}
