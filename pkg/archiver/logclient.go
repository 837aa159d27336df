package archiver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
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
// Where it cannot stand in for client-go's, the clientset is client-go's: a proxy, a dialer, a
// transport or an authentication plugin of cfg's, client certificate files (client-go reloads them
// as they rotate), HTTP/2 turned off or tuned (cfg's NextProtos without h2, DISABLE_HTTP2,
// HTTP2_READ_IDLE_TIMEOUT_SECONDS, HTTP2_PING_TIMEOUT_SECONDS), or plain HTTP; and so it is, from
// the first refusal on, when the server does not speak HTTP/2. To look at again with Go 1.27,
// whose x/net HTTP/2 transport wraps net/http's.
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
// closed; a dial takes at most dialTimeout, its TLS handshake tlsHandshakeTimeout.
const (
	h2ReadIdleTimeout   = 30 * time.Second
	h2PingTimeout       = 15 * time.Second
	h2IdleConnTimeout   = 90 * time.Second
	dialTimeout         = 30 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
)

// errNoH2 is a server's answer to a connection of HTTP/2 that it does not speak.
var errNoH2 = errors.New("the server does not speak HTTP/2")

// dialH2 opens a TLS connection to addr and checks that it speaks HTTP/2 (as x/net's transport
// does when it dials itself), within the timeouts of client-go's.
func dialH2(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
	raw, err := (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
	defer cancel()
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
		c.Close()
		return nil, fmt.Errorf("%w: it chose %q", errNoH2, p)
	}
	return c, nil
}

// logsTransport is the round tripper of LogsClientset, nil where client-go's must serve.
func logsTransport(cfg *rest.Config) (http.RoundTripper, error) {
	if cfg.Transport != nil || cfg.WrapTransport != nil || cfg.Dial != nil || cfg.Proxy != nil ||
		cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.CertFile != "" || cfg.KeyFile != "" ||
		(len(cfg.NextProtos) > 0 && !slices.Contains(cfg.NextProtos, http2.NextProtoTLS)) {
		return nil, nil
	}
	for _, env := range []string{"DISABLE_HTTP2", "HTTP2_READ_IDLE_TIMEOUT_SECONDS", "HTTP2_PING_TIMEOUT_SECONDS"} {
		if os.Getenv(env) != "" {
			return nil, nil
		}
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
	h2, err := rest.HTTPWrappersForConfig(cfg, &http2.Transport{TLSClientConfig: tlsConfig, DialTLSContext: dialH2,
		DisableCompression: cfg.DisableCompression,
		ReadIdleTimeout:    h2ReadIdleTimeout, PingTimeout: h2PingTimeout, IdleConnTimeout: h2IdleConnTimeout})
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

// refusedTries is how many times a GET whose stream a server reset with PROTOCOL_ERROR is sent.
const refusedTries = 3

func (t *h2First) RoundTrip(req *http.Request) (*http.Response, error) {
	for try := 1; !t.noH2.Load(); try++ {
		resp, err := t.h2.RoundTrip(req)
		switch {
		case errors.Is(err, errNoH2):
			// The server's refusal comes as it negotiates the connection, before any request is
			// sent on it: sending the request again is safe.
			t.noH2.Store(true)
		case try < refusedTries && req.Method == http.MethodGet && protocolError(err):
			// The streams that waited for a new connection take it before its server's
			// settings arrive, as if it took 100 streams (HTTP/2's initial assumption): a server
			// that takes fewer refuses the others, with REFUSED_STREAM (which x/net sends again
			// itself) or, once it has its settings acknowledged, PROTOCOL_ERROR. A GET of a log
			// is safe to send again; x/net no longer uses that connection for new streams.
		default:
			return resp, err
		}
	}
	return t.fallback.RoundTrip(req)
}

// protocolError reports whether err is a stream reset with PROTOCOL_ERROR.
func protocolError(err error) bool {
	var se http2.StreamError
	return errors.As(err, &se) && se.Code == http2.ErrCodeProtocol
}
