package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
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

// The admission webhook against the real kube-apiserver and the real Volcano controller. Each test
// serves its own webhook in this process (a manager with admission.SetupWithManager, as the binary
// does, on 127.0.0.1 with certificates from certs/certgen) and registers config/webhook's
// MutatingWebhookConfiguration with the clientConfig swapped for that URL and CA, and its
// namespaceSelector narrowed to the test's namespaces so that no other test is affected.

// whProbeLabel selects the probe ConfigMaps of whRegistration.wait.
const whProbeLabel = "e2e.jobvault.io/probe"

// whServer is a webhook served in this process.
type whServer struct {
	addr    string // 127.0.0.1:port
	certDir string
	ca      *certgen.CA
	server  webhook.Server // serves admission.Register's paths; a test may add its own
}

// whStart serves the webhook until the test ends.
func whStart(tb testing.TB, env *testbed.Env) *whServer {
	tb.Helper()
	ca, err := certgen.NewCA("jobvault-e2e-ca", time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	s := &whServer{certDir: tb.TempDir(), ca: ca}
	s.rotate(tb, ca)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

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
	s.server = mgr.GetWebhookServer()
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
		tb.Fatalf("webhook server on %s did not start: %v", s.addr, err)
	}
	return s
}

// rotate writes a new serving certificate issued by ca into the certificate directory.
func (s *whServer) rotate(tb testing.TB, ca *certgen.CA) *x509.Certificate {
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
func (s *whServer) servedSerial() (*big.Int, error) {
	conn, err := tls.Dial("tcp", s.addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only reads the certificate
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// waitServes waits until the server presents cert: the hot reload under test.
func (s *whServer) waitServes(tb testing.TB, cert *x509.Certificate) time.Duration {
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

// httpClient trusts only the server's CA.
func (s *whServer) httpClient(tb testing.TB) *http.Client {
	tb.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.ca.CertPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// whRenderConfig renders config/webhook and returns its MutatingWebhookConfiguration.
func whRenderConfig(tb testing.TB) *admissionregistrationv1.MutatingWebhookConfiguration {
	tb.Helper()
	cmd := exec.Command("kubectl", "kustomize", filepath.Join("..", "..", "config", "webhook"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("kubectl kustomize config/webhook: %v\n%s", err, stderr.String())
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			tb.Fatal(err)
		}
		if meta.Kind != "MutatingWebhookConfiguration" {
			continue
		}
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := yaml.UnmarshalStrict([]byte(doc), &cfg); err != nil {
			tb.Fatalf("config/webhook's MutatingWebhookConfiguration: %v", err)
		}
		return &cfg
	}
	tb.Fatal("config/webhook renders no MutatingWebhookConfiguration")
	return nil
}

// whRegistration is config/webhook's MutatingWebhookConfiguration registered for one test.
type whRegistration struct {
	env        *testbed.Env
	name       string
	namespaces []string
	generation int
}

// register registers the rendered configuration, pointed at s, for the given namespaces only, and
// waits until the API server calls it. tweak, if set, adjusts the webhooks (e.g. failurePolicy).
func (s *whServer) register(tb testing.TB, env *testbed.Env, namespaces []string, tweak func(*admissionregistrationv1.MutatingWebhook)) *whRegistration {
	tb.Helper()
	cfg := whRenderConfig(tb)
	r := &whRegistration{env: env, name: "jobvault-webhook-e2e-" + rand.String(6), namespaces: namespaces}
	cfg.ObjectMeta = metav1.ObjectMeta{Name: r.name}
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		url := "https://" + s.addr + *w.ClientConfig.Service.Path
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: s.ca.CertPEM}
		// Keep the rendered exclusions and add: only this test's namespaces.
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
	probe.ClientConfig.URL = utilptr.To("https://" + s.addr + admission.PodPath)
	probe.FailurePolicy = utilptr.To(admissionregistrationv1.Fail)
	probe.Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	probe.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{whProbeLabel: r.probeValue()}}
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

func (r *whRegistration) probeValue() string { return r.name + "-" + strconv.Itoa(r.generation) }

// update changes the registered configuration and waits until the API server uses the change.
func (r *whRegistration) update(tb testing.TB, change func(*admissionregistrationv1.MutatingWebhookConfiguration)) {
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
		probe.ObjectSelector.MatchLabels[whProbeLabel] = r.probeValue()
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
func (r *whRegistration) wait(tb testing.TB) {
	tb.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				GenerateName: "probe-", Namespace: r.namespaces[0], Labels: map[string]string{whProbeLabel: r.probeValue()},
			}}
			err := r.env.Client.Create(ctx, cm, client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "admits only v1/pods"), nil
		})
	if err != nil {
		tb.Fatalf("the API server did not pick up webhook configuration %s generation %d: %v", r.name, r.generation, err)
	}
}

// whRelease removes jobvault's finalizers from every VcJob and pod in ns and deletes the VcJobs,
// until none is left holding one, so that the namespace can go. No archiver runs here.
func whRelease(tb testing.TB, env *testbed.Env, ns string) {
	tb.Helper()
	ctx := context.Background()
	strip := func(obj client.Object, finalizer string) error {
		if !slices.Contains(obj.GetFinalizers(), finalizer) {
			return nil
		}
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		obj.SetFinalizers(slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == finalizer }))
		return client.IgnoreNotFound(env.Client.Patch(ctx, obj, patch))
	}
	quiet := 0
	// Minutes, not seconds: a benchmark leaves thousands of jobs, patched and deleted at the
	// client's rate limit.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		held := 0
		var jobs batchv1alpha1.JobList
		if err := env.Client.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for i := range jobs.Items {
			job := &jobs.Items[i]
			if job.DeletionTimestamp == nil || slices.Contains(job.Finalizers, tracking.JobFinalizer) {
				held++
			}
			if err := strip(job, tracking.JobFinalizer); err != nil && !apierrors.IsConflict(err) {
				return false, err
			}
			if job.DeletionTimestamp == nil {
				if err := env.Client.Delete(ctx, job); client.IgnoreNotFound(err) != nil {
					return false, err
				}
			}
		}
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if slices.Contains(pod.Finalizers, tracking.PodFinalizer) {
				held++
				if err := strip(pod, tracking.PodFinalizer); err != nil && !apierrors.IsConflict(err) {
					return false, err
				}
			}
		}
		// Volcano may still create a pod right after its job went: want two quiet rounds.
		if held == 0 {
			quiet++
		} else {
			quiet = 0
		}
		return quiet >= 2, nil
	})
	if err != nil {
		tb.Errorf("release jobvault's finalizers in %s: %v", ns, err)
	}
}

// whUnthrottled is a client without client-side rate limiting, for streams and latencies.
func whUnthrottled(tb testing.TB, env *testbed.Env, cfg *rest.Config) client.Client {
	tb.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// whWhoAmI returns the identity the API server gives c's credentials.
func whWhoAmI(t *testing.T, c client.Client) authenticationv1.UserInfo {
	t.Helper()
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(t.Context(), review); err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return review.Status.UserInfo
}

// whCheckStamped checks everything the VcJob webhook adds, for the user who created job.
func whCheckStamped(t *testing.T, job *batchv1alpha1.Job, user authenticationv1.UserInfo, before, after time.Time) {
	t.Helper()
	if !slices.Contains(job.Finalizers, tracking.JobFinalizer) {
		t.Errorf("finalizers = %v, want %s", job.Finalizers, tracking.JobFinalizer)
	}
	if !tracking.IsTracked(job.Labels) {
		t.Errorf("labels = %v, want %s=%s", job.Labels, tracking.TrackedLabel, tracking.TrackedValue)
	}
	for _, task := range job.Spec.Tasks {
		if !tracking.IsTracked(task.Template.Labels) {
			t.Errorf("task %s template labels = %v, want the tracking label", task.Name, task.Template.Labels)
		}
	}
	if got := job.Annotations[tracking.SubmitterAnnotation]; got != user.Username {
		t.Errorf("submitter = %q, want %q", got, user.Username)
	}
	var groups []string
	if err := json.Unmarshal([]byte(job.Annotations[tracking.SubmitterGroupsAnnotation]), &groups); err != nil {
		t.Errorf("submitter groups %q are not a JSON array: %v", job.Annotations[tracking.SubmitterGroupsAnnotation], err)
	} else if !slices.Equal(groups, user.Groups) {
		t.Errorf("submitter groups = %q, want %q", groups, user.Groups)
	}
	admitted, err := time.Parse(time.RFC3339, job.Annotations[tracking.AdmittedAtAnnotation])
	if err != nil || !strings.HasSuffix(job.Annotations[tracking.AdmittedAtAnnotation], "Z") {
		t.Errorf("admitted-at %q is not RFC 3339 UTC: %v", job.Annotations[tracking.AdmittedAtAnnotation], err)
	} else if admitted.Before(before.Truncate(time.Second)) || admitted.After(after) {
		t.Errorf("admitted-at %v is outside the create call [%v, %v]", admitted, before, after)
	}
}

// Two users create VcJobs; each comes back from the API server with the finalizer, the tracking
// labels and that user's identity exactly as the API server authenticated it.
func TestWebhookStampsSubmitter(t *testing.T) {
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	t.Cleanup(func() { whRelease(t, env, ns) })
	whStart(t, env).register(t, env, []string{ns}, nil)

	for _, u := range []struct {
		name   string
		groups []string
	}{{"alice", []string{"team-a"}}, {"bob", []string{"team-b", "auditors"}}} {
		t.Run(u.name, func(t *testing.T) {
			c, err := client.New(env.UserConfig(t, u.name, u.groups...), client.Options{Scheme: env.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			who := whWhoAmI(t, c)
			if who.Username != u.name {
				t.Fatalf("authenticated as %q, want %q", who.Username, u.name)
			}
			job := testbed.Job(ns, "by-"+u.name).Task("main", 1, []string{"main"}).Obj()
			before := time.Now()
			if err := c.Create(t.Context(), job); err != nil {
				t.Fatalf("create VcJob as %s: %v", u.name, err)
			}
			whCheckStamped(t, job, who, before, time.Now())
			// What is stored, not only what the create returned.
			var stored batchv1alpha1.Job
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &stored); err != nil {
				t.Fatal(err)
			}
			whCheckStamped(t, &stored, who, before, time.Now())
		})
	}
}

// generateName, and everything the user set in metadata, survive; a forged submitter does not.
func TestWebhookKeepsMetadata(t *testing.T) {
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	t.Cleanup(func() { whRelease(t, env, ns) })
	whStart(t, env).register(t, env, []string{ns}, nil)

	job := testbed.Job(ns, "").Labels(map[string]string{"team": "x"}).
		Task("worker", 1, []string{"main"}, func(p *corev1.PodTemplateSpec) { p.Labels = map[string]string{"role": "worker"} }).
		Task("ps", 1, []string{"main"}).Obj()
	job.GenerateName = "gen-"
	job.Annotations = map[string]string{"note": "keep me", tracking.SubmitterAnnotation: "mallory", tracking.AdmittedAtAnnotation: "2001-01-01T00:00:00Z"}
	job.Finalizers = []string{"example.com/keep"}
	before := time.Now()
	if err := env.Client.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	whCheckStamped(t, job, whWhoAmI(t, env.Client), before, time.Now())
	if !strings.HasPrefix(job.Name, "gen-") || len(job.Name) <= len("gen-") {
		t.Errorf("name = %q, want generated from gen-", job.Name)
	}
	if want := []string{"example.com/keep", tracking.JobFinalizer}; !slices.Equal(job.Finalizers, want) {
		t.Errorf("finalizers = %v, want %v", job.Finalizers, want)
	}
	if job.Labels["team"] != "x" || job.Annotations["note"] != "keep me" {
		t.Errorf("labels %v / annotations %v lost the user's", job.Labels, job.Annotations)
	}
	if job.Spec.Tasks[0].Template.Labels["role"] != "worker" {
		t.Errorf("task template labels = %v, lost role=worker", job.Spec.Tasks[0].Template.Labels)
	}
	// The KWOK stage annotations of the templates are the user's too.
	if len(job.Spec.Tasks[1].Template.Annotations) == 0 {
		t.Errorf("task template annotations were dropped")
	}
}

// The pods Volcano creates for a tracked job carry the label and the pod finalizer; a pod without
// the label is never sent to the webhook; a labelled pod created directly is tracked too.
func TestWebhookTracksVolcanoPods(t *testing.T) {
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	t.Cleanup(func() { whRelease(t, env, ns) })
	whStart(t, env).register(t, env, []string{ns}, nil)
	ctx := t.Context()

	job := testbed.Job(ns, "pods").Task("worker", 2, []string{"main"}).Obj()
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1alpha1.JobNameKey: job.Name}); err != nil {
			return false, err
		}
		return len(pods.Items) >= 2, nil
	})
	if err != nil {
		t.Fatalf("Volcano created %d pods for %s: %v", len(pods.Items), job.Name, err)
	}
	for _, p := range pods.Items {
		if !tracking.IsTracked(p.Labels) || !slices.Contains(p.Finalizers, tracking.PodFinalizer) {
			t.Errorf("Volcano pod %s: labels %v finalizers %v, want the tracking label and %s", p.Name, p.Labels, p.Finalizers, tracking.PodFinalizer)
		}
	}

	plain := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	labelled := plain.DeepCopy()
	labelled.Name, labelled.Labels = "labelled", map[string]string{tracking.TrackedLabel: tracking.TrackedValue}
	for _, p := range []*corev1.Pod{plain, labelled} {
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if len(plain.Finalizers) != 0 || tracking.IsTracked(plain.Labels) {
		t.Errorf("untracked pod: labels %v finalizers %v, want neither touched", plain.Labels, plain.Finalizers)
	}
	if !slices.Equal(labelled.Finalizers, []string{tracking.PodFinalizer}) {
		t.Errorf("labelled pod: finalizers %v, want [%s]", labelled.Finalizers, tracking.PodFinalizer)
	}
}

var whJobPatchPath = regexp.MustCompile(`^/metadata/|^/spec/tasks/[0-9]+/template/metadata(/|$)`)

// Straight to the HTTPS endpoint: a VcJob with fields newer than our volcano.sh/apis (the API server
// prunes unknown fields of the structural Volcano CRD before admission, so this is checked here)
// gets only additions under metadata; malformed requests get a 400 with the reason.
func TestWebhookHTTPS(t *testing.T) {
	env := testbed.Cluster(t)
	s := whStart(t, env)
	hc := s.httpClient(t)
	base := "https://" + s.addr

	jobRaw := []byte(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job",
	  "metadata":{"generateName":"future-","namespace":"ml"},
	  "spec":{"someFutureField":{"x":[1,2.50,9007199254740993]},"minAvailable":1,
	    "tasks":[{"name":"w","replicas":1,"futureTaskField":{"a":"b"},
	      "template":{"spec":{"containers":[{"name":"c","image":"busybox","resources":{"limits":{"cpu":"1.50"}}}]}}}]}}`)
	review := func(resource metav1.GroupVersionResource, kind metav1.GroupVersionKind, object []byte) []byte {
		body, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: "e2e-1", Kind: kind, Resource: resource, Namespace: "ml", Operation: admissionv1.Create,
				UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"team-a"}},
				Object:   runtime.RawExtension{Raw: object},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	jobGVR := metav1.GroupVersionResource{Group: "batch.volcano.sh", Version: "v1alpha1", Resource: "jobs"}
	jobGVK := metav1.GroupVersionKind{Group: "batch.volcano.sh", Version: "v1alpha1", Kind: "Job"}
	post := func(t *testing.T, method, path, contentType string, body []byte) *admissionv1.AdmissionResponse {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(raw, &out); err != nil || out.Response == nil {
			t.Fatalf("HTTP %d %q is not an AdmissionReview with a response (%v)", resp.StatusCode, raw, err)
		}
		return out.Response
	}

	t.Run("unknown fields survive", func(t *testing.T) {
		r := post(t, http.MethodPost, admission.JobPath, "application/json", review(jobGVR, jobGVK, jobRaw))
		if !r.Allowed || r.UID != "e2e-1" {
			t.Fatalf("response %+v, want allowed for uid e2e-1", r)
		}
		var ops []struct{ Op, Path string }
		if err := json.Unmarshal(r.Patch, &ops); err != nil || len(ops) == 0 {
			t.Fatalf("patch %s: %v", r.Patch, err)
		}
		for _, op := range ops {
			if op.Op != "add" || !whJobPatchPath.MatchString(op.Path) {
				t.Errorf("patch operation %s %s, want only add under /metadata and the templates' metadata", op.Op, op.Path)
			}
		}
		patch, err := jsonpatch.DecodePatch(r.Patch)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := patch.Apply(jobRaw)
		if err != nil {
			t.Fatal(err)
		}
		for _, literal := range []string{"9007199254740993", `"1.50"`, `"futureTaskField"`, "2.50"} {
			if !bytes.Contains(patched, []byte(literal)) {
				t.Errorf("patched object lost %s: %s", literal, patched)
			}
		}
	})

	good := review(jobGVR, jobGVK, jobRaw)
	for _, tc := range []struct {
		name, method, path, contentType string
		body                            []byte
		wantMsg                         string
	}{
		{"garbage", http.MethodPost, admission.JobPath, "application/json", []byte("garbage"), "couldn't get version/kind"},
		{"truncated", http.MethodPost, admission.JobPath, "application/json", good[:len(good)/3], "unexpected"},
		{"empty", http.MethodPost, admission.PodPath, "application/json", nil, "request body is empty"},
		{"GET", http.MethodGet, admission.JobPath, "application/json", nil, "request body is empty"},
		{"wrong content type", http.MethodPost, admission.JobPath, "application/yaml", good, "expected application/json"},
		{"VcJob to the pod path", http.MethodPost, admission.PodPath, "application/json", good, "admits only v1/pods"},
		{"object of another kind", http.MethodPost, admission.JobPath, "application/json",
			review(jobGVR, jobGVK, []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{}}`)), `request.object is apiVersion "v1" kind "Pod"`},
		{"object that does not decode", http.MethodPost, admission.JobPath, "application/json",
			review(jobGVR, jobGVK, []byte(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"labels":[]}}`)), "metadata.labels is an array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, tc.method, tc.path, tc.contentType, tc.body)
			if r.Allowed || len(r.Patch) != 0 || r.Result == nil || r.Result.Code != http.StatusBadRequest {
				t.Fatalf("response %+v, want a 400 denial without patch", r)
			}
			if !strings.Contains(r.Result.Message, tc.wantMsg) {
				t.Errorf("message %q, want it to contain %q", r.Result.Message, tc.wantMsg)
			}
		})
	}

	t.Run("untrusted client CA", func(t *testing.T) {
		_, err := http.Post(base+admission.JobPath, "application/json", bytes.NewReader(good)) //nolint:noctx
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("plain client error %v, want an unknown-authority TLS error", err)
		}
	})
}

// Serving certificates rotate, first under the same CA and then to a new CA (trusting both
// during the switch, as config/README.md describes), while creates stream through the API
// server. With failurePolicy Fail on both webhooks any failed call would fail a create: there must
// be none, and every created object must carry its finalizer.
func TestWebhookCertRotation(t *testing.T) {
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	s := whStart(t, env)
	reg := s.register(t, env, []string{ns}, func(w *admissionregistrationv1.MutatingWebhook) {
		w.FailurePolicy = utilptr.To(admissionregistrationv1.Fail)
	})
	c := whUnthrottled(t, env, env.Config)

	var ok, failed atomic.Int64
	var failures sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				var err error
				if i%2 == 0 {
					job := testbed.Job(ns, fmt.Sprintf("rot-%d-%d", w, i)).Task("main", 1, []string{"main"}).Obj()
					if err = c.Create(ctx, job, client.DryRunAll); err == nil && !slices.Contains(job.Finalizers, tracking.JobFinalizer) {
						err = errors.New("VcJob admitted without the job finalizer")
					}
				} else {
					pod := &corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rot-%d-%d", w, i), Namespace: ns, Labels: map[string]string{tracking.TrackedLabel: tracking.TrackedValue}},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
					}
					if err = c.Create(ctx, pod, client.DryRunAll); err == nil && !slices.Contains(pod.Finalizers, tracking.PodFinalizer) {
						err = errors.New("tracked pod admitted without the pod finalizer")
					}
				}
				cancel()
				if err != nil {
					failed.Add(1)
					failures.Store(err.Error(), true)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	pause := func() { time.Sleep(time.Second) }

	pause()
	took := s.waitServes(t, s.rotate(t, s.ca))
	t.Logf("same CA: rotated certificate served after %v", took)
	pause()

	next, err := certgen.NewCA("jobvault-e2e-ca-2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	setBundle := func(pems ...[]byte) func(*admissionregistrationv1.MutatingWebhookConfiguration) {
		return func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig.CABundle = bytes.Join(pems, nil)
			}
		}
	}
	reg.update(t, setBundle(s.ca.CertPEM, next.CertPEM))
	pause()
	took = s.waitServes(t, s.rotate(t, next))
	t.Logf("new CA: rotated certificate served after %v", took)
	pause()
	reg.update(t, setBundle(next.CertPEM))
	s.ca = next
	pause()

	close(stop)
	wg.Wait()
	t.Logf("%d admissions succeeded, %d failed during rotation", ok.Load(), failed.Load())
	failures.Range(func(k, _ any) bool { t.Errorf("admission failed: %v", k); return true })
	if failed.Load() != 0 {
		t.Fatalf("%d admissions failed during certificate rotation, want 0", failed.Load())
	}
	if ok.Load() < 20 {
		t.Errorf("only %d admissions during rotation: the stream did not exercise it", ok.Load())
	}
}
