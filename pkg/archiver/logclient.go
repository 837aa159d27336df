package archiver

import (
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// LogsClientset is the clientset KubeLogs streams pods' logs with: cfg's, over x/net's own
// HTTP/2 transport where cfg allows it.
//
// Why not client-go's transport: the API server takes 100 streams a connection (its default), and
// a burst of ended pods opens hundreds of log streams at once. client-go's transport (net/http with
// HTTP/2 configured in) dials a new connection for every request that finds each connection
// full, and keeps only those it needs: in the drain of 1,000 pods (BenchmarkReleaseThroughput,
// 2026-11-28), 348 requests found no connection to take them and dialed, 11 connections were kept,
// and TLS handshakes took 11 to 12% of the archiver's CPU. x/net's transport dials once for all
// the requests waiting for a connection.
//
// Where it cannot stand in for client-go's (a proxy, a dialer, a transport or an authentication
// plugin of cfg's, or plain HTTP), the clientset is client-go's; so it is, from the first refusal
// on, when the server does not speak HTTP/2.
func LogsClientset(cfg *rest.Config) (kubernetes.Interface, error) {
	rt, err := logsTransport(cfg)
	switch {
	case err != nil:
		return nil, err
	case rt == nil:
		return kubernetes.NewForConfig(cfg)
	}
	return kubernetes.NewForConfigAndClient(cfg, &http.Client{Transport: rt, Timeout: cfg.Timeout})
}

// The connection settings of client-go's transport (k8s.io/client-go/transport,
// k8s.io/apimachinery/pkg/util/net): a connection silent for h2ReadIdleTimeout is pinged, and
// closed if the ping is not answered within h2PingTimeout; one idle for h2IdleConnTimeout is
// closed.
const (
	h2ReadIdleTimeout = 30 * time.Second
	h2PingTimeout     = 15 * time.Second
	h2IdleConnTimeout = 90 * time.Second
)

// logsTransport is the round tripper of LogsClientset, nil where client-go's must serve.
func logsTransport(cfg *rest.Config) (http.RoundTripper, error) {
	if cfg.Transport != nil || cfg.WrapTransport != nil || cfg.Dial != nil || cfg.Proxy != nil ||
		cfg.ExecProvider != nil || cfg.AuthProvider != nil {
		return nil, nil
	}
	host, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, err
	}
	if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: host}); err != nil || proxy != nil || host.Scheme != "https" {
		return nil, nil //nolint:nilerr // a proxy, or a setting of one we cannot read: client-go's transport decides
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil || tlsConfig == nil {
		return nil, err
	}
	// Offered beside h2 so that a server of HTTP/1.1 alone says so (a server of Go refuses a
	// handshake that offers nothing it speaks), and the transport then falls back.
	tlsConfig.NextProtos = []string{http2.NextProtoTLS, "http/1.1"}
	h2, err := rest.HTTPWrappersForConfig(cfg, &http2.Transport{TLSClientConfig: tlsConfig,
		ReadIdleTimeout: h2ReadIdleTimeout, PingTimeout: h2PingTimeout, IdleConnTimeout: h2IdleConnTimeout})
	if err != nil {
		return nil, err
	}
	fallback, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	return &h2First{h2: h2, fallback: fallback}, nil
}

// h2First sends requests over x/net's HTTP/2 transport, and over the fallback (client-go's) once
// the server has refused HTTP/2.
type h2First struct {
	h2, fallback http.RoundTripper
	noH2         atomic.Bool
}

func (t *h2First) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.noH2.Load() {
		resp, err := t.h2.RoundTrip(req)
		// The server's refusal comes as it negotiates the connection, before any request is
		// sent on it: sending the request again is safe.
		if err == nil || !strings.Contains(err.Error(), "unexpected ALPN protocol") {
			return resp, err
		}
		t.noH2.Store(true)
	}
	return t.fallback.RoundTrip(req)
}
