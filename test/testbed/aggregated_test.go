package testbed_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/certs/certgen"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestAggregatedAPIReachesLocalServer proves the path an aggregated API takes on the testbed: an
// APIService whose Service is an ExternalName of localhost reaches a server of the test on
// 127.0.0.1, which the kube-apiserver's aggregator calls with its front-proxy client certificate
// (signed by the CA it publishes in kube-system/extension-apiserver-authentication) and the
// authenticated user in the request headers the ConfigMap names.
func TestAggregatedAPIReachesLocalServer(t *testing.T) {
	env := testbed.Cluster(t)
	ctx := t.Context()

	var cm corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, &cm); err != nil {
		t.Fatal(err)
	}
	frontProxyCA := cm.Data["requestheader-client-ca-file"]
	if frontProxyCA == "" {
		t.Fatalf("extension-apiserver-authentication has no requestheader-client-ca-file: kube-apiserver runs without the front-proxy flags (keys: %v)", keys(cm.Data))
	}
	for key, want := range map[string]string{
		"requestheader-allowed-names":        `["` + testbed.FrontProxyClientName + `"]`,
		"requestheader-username-headers":     `["X-Remote-User"]`,
		"requestheader-group-headers":        `["X-Remote-Group"]`,
		"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
	} {
		if got := cm.Data[key]; got != want {
			t.Errorf("extension-apiserver-authentication %s = %q, want %q", key, got, want)
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(frontProxyCA)) {
		t.Fatal("requestheader-client-ca-file holds no certificate")
	}

	const group, version = "selftest.testbed.jobvault.io", "v1"
	ca, err := certgen.NewCA("aggregated-selftest-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue(certgen.Options{Service: "selftest-api", Namespace: "jobvault-testbed"})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serving.Cert, serving.Key)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		users = map[string]string{} // user -> groups, as the aggregator passed them
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/apis/"+group+"/"+version, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group + "/" + version,
			"resources": []map[string]any{{"name": "things", "namespaced": true, "kind": "Thing", "verbs": []string{"get", "list"}}}})
	})
	mux.HandleFunc("/apis/"+group+"/"+version+"/namespaces/{ns}/things", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		users[r.Header.Get("X-Remote-User")] = strings.Join(r.Header.Values("X-Remote-Group"), ",")
		mu.Unlock()
		writeJSON(w, map[string]any{"kind": "ThingList", "apiVersion": group + "/" + version, "metadata": map[string]any{}, "items": []any{}})
	})
	l, port := testbed.ListenLocal(t)
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{pair},
		// Only the aggregator, with the front-proxy client certificate, may call.
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 && cs.PeerCertificates[0].Subject.CommonName != testbed.FrontProxyClientName {
				return &tls.CertificateVerificationError{Err: errNotFrontProxy}
			}
			return nil
		},
	}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	env.RegisterAPIService(t, testbed.APIService{Group: group, Version: version, Port: port,
		Service: "selftest-api", Namespace: "jobvault-testbed", CABundle: serving.CACert})

	cs, err := kubernetes.NewForConfig(env.UserConfig(t, "aggregated-alice", "team-a"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := cs.RESTClient().Get().AbsPath("/apis", group, version, "namespaces", "default", "things").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("list things through the aggregator: %v (%s)", err, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if got, ok := users["aggregated-alice"]; !ok || !strings.Contains(got, "team-a") {
		t.Errorf("the server saw users %v, want aggregated-alice in group team-a", users)
	}
}

type certError string

func (e certError) Error() string { return string(e) }

const errNotFrontProxy = certError("client certificate is not the front proxy's")

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
