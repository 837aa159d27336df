package testbed

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/jobvault/jobvault/certs/certgen"
)

// FrontProxyClientName is the common name of the client certificate with which kube-apiserver's
// aggregator presents requests to aggregated API servers (--proxy-client-cert-file); it is the
// only name of --requestheader-allowed-names.
const FrontProxyClientName = "front-proxy-client"

// The request headers by which the aggregator passes the authenticated user on, as kubeadm
// configures them: an aggregated server built with k8s.io/apiserver reads these names, and the
// front-proxy CA, from the kube-system/extension-apiserver-authentication ConfigMap.
const (
	remoteUserHeader        = "X-Remote-User"
	remoteGroupHeader       = "X-Remote-Group"
	remoteExtraHeaderPrefix = "X-Remote-Extra-"
)

// configureFrontProxy mints a front-proxy CA and the aggregator's client certificate into dir (the
// work dir, never the repository) and sets kube-apiserver's front-proxy flags, so that it proxies
// requests for an APIService to an aggregated API server with the user in request headers, as a
// kubeadm cluster does. Aggregator routing stays off: the aggregator dials the Service by its
// cluster name, or an ExternalName Service's name (RegisterAPIService uses localhost).
func configureFrontProxy(api *envtest.APIServer, dir string) error {
	ca, err := certgen.NewCA("testbed-front-proxy-ca", 24*time.Hour)
	if err != nil {
		return err
	}
	client, err := ca.IssueClient(FrontProxyClientName, 24*time.Hour)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create front-proxy certificate dir: %w", err)
	}
	files := map[string][]byte{"ca.crt": client.CACert, "client.crt": client.Cert, "client.key": client.Key}
	for name, data := range files {
		if err := certgen.WriteFileAtomic(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	args := api.Configure()
	args.Set("requestheader-client-ca-file", filepath.Join(dir, "ca.crt"))
	args.Set("requestheader-allowed-names", FrontProxyClientName)
	args.Set("requestheader-username-headers", remoteUserHeader)
	args.Set("requestheader-group-headers", remoteGroupHeader)
	args.Set("requestheader-extra-headers-prefix", remoteExtraHeaderPrefix)
	args.Set("proxy-client-cert-file", filepath.Join(dir, "client.crt"))
	args.Set("proxy-client-key-file", filepath.Join(dir, "client.key"))
	return nil
}

// auditPolicy records every request to jobvault's archive API (who read which archived job and
// log) and nothing else, so that the log stays small.
var auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: archive.jobvault.io
` + podStatusAuditRule + `- level: None
`

// podStatusAuditRule is auditPolicy's rule for writes of pods' status, kept only when
// AuditPodStatusEnv is set: a benchmark that counts requests by client (who patches pods/status
// while the archiver drains) finds their user and user agent in the log. Off by default, as
// every pod's status is written a few times.
var podStatusAuditRule = func() string {
	if os.Getenv(AuditPodStatusEnv) == "" {
		return ""
	}
	return `- level: Metadata
  verbs: ["patch", "update"]
  resources:
  - group: ""
    resources: ["pods/status"]
`
}()

// AuditPodStatusEnv, set (to anything) when the cluster starts, has the audit log record every
// write of a pod's status too.
const AuditPodStatusEnv = "JOBVAULT_TESTBED_AUDIT_POD_STATUS"

// configureAudit writes auditPolicy into dir and has kube-apiserver log the requests it selects,
// as JSON lines, to AuditLogPath.
func configureAudit(api *envtest.APIServer, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create audit dir: %w", err)
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return fmt.Errorf("write audit policy: %w", err)
	}
	args := api.Configure()
	args.Set("audit-policy-file", policy)
	args.Set("audit-log-path", filepath.Join(dir, "audit.log"))
	args.Set("audit-log-format", "json")
	return nil
}

// AuditLogPath is the kube-apiserver's audit log: a JSON event per line for every request to
// the archive API (archive.jobvault.io), with the user who made it.
func (e *Env) AuditLogPath() string { return filepath.Join(WorkDir(), "audit", "audit.log") }

// APIService describes an aggregated API served by a process of the test on 127.0.0.1.
type APIService struct {
	Group, Version string
	// Port is where the server listens on 127.0.0.1 (and localhost).
	Port int
	// Service and Namespace name the ExternalName Service the APIService points at; the
	// aggregator verifies the server's certificate for <Service>.<Namespace>.svc.
	Service, Namespace string
	// CABundle is the PEM of the CA that signed the server's serving certificate.
	CABundle []byte
}

var apiServiceGVK = schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"}

// RegisterAPIService registers an aggregated API whose server runs on 127.0.0.1:s.Port: a Service
// of type ExternalName with externalName localhost (the aggregator's resolver turns it into
// https://localhost:<port>) and an APIService pointing at it. It waits until the aggregator
// reports the APIService Available and removes both when the test ends. The cluster is shared
// by the test binary: one test at a time may register a group and version.
func (e *Env) RegisterAPIService(t T, s APIService) {
	t.Helper()
	ctx := context.Background()
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("testbed: create namespace %s: %v", s.Namespace, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Service, Namespace: s.Namespace},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(s.Port)}},
		},
	}
	if err := e.Client.Create(ctx, svc); err != nil {
		t.Fatalf("testbed: create Service %s/%s: %v", s.Namespace, s.Service, err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), svc) })
	apiService := &unstructured.Unstructured{}
	apiService.SetGroupVersionKind(apiServiceGVK)
	apiService.SetName(s.Version + "." + s.Group)
	apiService.Object["spec"] = map[string]any{
		"group":                s.Group,
		"version":              s.Version,
		"groupPriorityMinimum": int64(1000),
		"versionPriority":      int64(15),
		"caBundle":             base64.StdEncoding.EncodeToString(s.CABundle),
		"service":              map[string]any{"name": s.Service, "namespace": s.Namespace, "port": int64(s.Port)},
	}
	if err := e.Client.Create(ctx, apiService); err != nil {
		t.Fatalf("testbed: create APIService %s: %v", apiService.GetName(), err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), apiService) })
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := poll(wait, func() error { return e.apiServiceAvailable(wait, apiService.GetName()) }); err != nil {
		t.Fatalf("testbed: APIService %s (https://localhost:%d) not available: %v", apiService.GetName(), s.Port, err)
	}
}

// apiServiceAvailable returns nil once the aggregator's Available condition of the APIService
// name is True, else its reason and message.
func (e *Env) apiServiceAvailable(ctx context.Context, name string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(apiServiceGVK)
	if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		return err
	}
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" {
			if m["status"] == "True" {
				return nil
			}
			return fmt.Errorf("Available %v: %v: %v", m["status"], m["reason"], m["message"])
		}
	}
	return fmt.Errorf("no Available condition yet")
}

// ListenLocal listens on a free port of 127.0.0.1 for an aggregated API server of the test and
// closes the listener when the test ends.
func ListenLocal(t T) (net.Listener, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testbed: listen on 127.0.0.1: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, l.Addr().(*net.TCPAddr).Port
}
