package archiver

import (
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// logServer is a TLS server answering pods/log requests with one line, then holding the stream
// open until the test ends, as a followed container's log does. It takes maxStreams streams a
// connection over HTTP/2 (the API server's default is 100), or HTTP/1.1 only.
type logServer struct {
	*httptest.Server
	conns   atomic.Int64 // connections accepted
	http1   atomic.Int64 // requests served over HTTP/1.1
	release chan struct{}
}

func newLogServer(t *testing.T, h2 bool, maxStreams uint32) *logServer {
	t.Helper()
	s := &logServer{release: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 {
			s.http1.Add(1)
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "2026-11-28T00:00:00Z a line\n")
		w.(http.Flusher).Flush()
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if h2 {
		if err := http2.ConfigureServer(s.Config, &http2.Server{MaxConcurrentStreams: maxStreams}); err != nil {
			t.Fatal(err)
		}
		s.TLS = s.Config.TLSConfig
	}
	s.StartTLS()
	t.Cleanup(func() {
		close(s.release)
		s.Close()
	})
	return s
}

// config is a client configuration that trusts the server.
func (s *logServer) config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return &rest.Config{Host: s.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}, BearerToken: "token", QPS: -1}
}

// openStreams opens n log streams at once through cs and reads each one's first line.
func openStreams(t *testing.T, cs kubernetes.Interface, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			rc, err := cs.CoreV1().Pods("ns").GetLogs("pod", &corev1.PodLogOptions{Follow: true}).Stream(ctx)
			if err != nil {
				errs <- err
				return
			}
			t.Cleanup(func() { rc.Close() })
			line := make([]byte, 28)
			if _, err := io.ReadFull(rc, line); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("open a log stream: %v", err)
	}
}

// TestLogsClientDialsOnceForWaitingStreams: a burst of log streams, more than the server takes a
// connection, opens about one connection for each of its stream limit: client-go's transport
// dialed one for nearly every stream that found the connections full (issue 28).
func TestLogsClientDialsOnceForWaitingStreams(t *testing.T) {
	const streams, perConn = 200, 20
	s := newLogServer(t, true, perConn)
	cs, err := LogsClientset(s.config())
	if err != nil {
		t.Fatal(err)
	}
	openStreams(t, cs, streams)
	if n, most := s.conns.Load(), int64(2*streams/perConn); n > most {
		t.Errorf("%d log streams opened %d connections, want at most %d (the server takes %d a connection)", streams, n, most, perConn)
	} else {
		t.Logf("%d log streams opened %d connections (the server takes %d a connection)", streams, n, perConn)
	}
}

// TestLogsClientFallsBackToHTTP1: from a server that does not speak HTTP/2, the logs come over
// client-go's transport.
func TestLogsClientFallsBackToHTTP1(t *testing.T) {
	s := newLogServer(t, false, 0)
	cs, err := LogsClientset(s.config())
	if err != nil {
		t.Fatal(err)
	}
	openStreams(t, cs, 3)
	if n := s.http1.Load(); n != 3 {
		t.Errorf("%d of 3 log streams served over HTTP/1.1", n)
	}
}

// TestLogsClientUsesClientGoWhereItMust: a configuration with a proxy, a dialer, an
// authentication plugin, client certificate files (client-go reloads them as they rotate), or
// HTTP/2 turned off or tuned keeps client-go's transport; a plain one takes x/net's.
func TestLogsClientUsesClientGoWhereItMust(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	for name, edit := range map[string]func(*testing.T, *rest.Config){
		"proxy":  func(_ *testing.T, c *rest.Config) { c.Proxy = http.ProxyFromEnvironment },
		"dialer": func(_ *testing.T, c *rest.Config) { c.Dial = (&net.Dialer{}).DialContext },
		"plain HTTP": func(_ *testing.T, c *rest.Config) {
			c.Host, c.TLSClientConfig = "http://127.0.0.1:1", rest.TLSClientConfig{}
		},
		"exec plugin": func(_ *testing.T, c *rest.Config) { c.ExecProvider = &clientcmdapi.ExecConfig{Command: "true"} },
		"cert files":  func(_ *testing.T, c *rest.Config) { c.CertFile, c.KeyFile = "tls.crt", "tls.key" },
		"http/1.1":    func(_ *testing.T, c *rest.Config) { c.NextProtos = []string{"http/1.1"} },
		"DISABLE_HTTP2": func(t *testing.T, _ *rest.Config) {
			t.Setenv("DISABLE_HTTP2", "true")
		},
		"HTTP2_PING_TIMEOUT_SECONDS": func(t *testing.T, _ *rest.Config) {
			t.Setenv("HTTP2_PING_TIMEOUT_SECONDS", "5")
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := (&logServer{Server: srv}).config()
			edit(t, cfg)
			if rt, err := logsTransport(cfg); err != nil || rt != nil {
				t.Errorf("logsTransport = %T, %v; want none (client-go's)", rt, err)
			}
		})
	}
	for _, env := range []string{"DISABLE_HTTP2", "HTTP2_READ_IDLE_TIMEOUT_SECONDS", "HTTP2_PING_TIMEOUT_SECONDS"} {
		t.Setenv(env, "") // as the machine's environment may set them
	}
	if rt, err := logsTransport((&logServer{Server: srv}).config()); err != nil || rt == nil {
		t.Errorf("logsTransport of a plain configuration = %v, %v; want x/net's", rt, err)
	}
}

// answers is a round tripper that answers each request with the next of its errors, then with
// 200.
type answers struct {
	errs  []error
	calls int
}

func (a *answers) RoundTrip(*http.Request) (*http.Response, error) {
	a.calls++
	if a.calls <= len(a.errs) {
		return nil, a.errs[a.calls-1]
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// TestLogsClientSendsARefusedGetAgain: a GET whose stream the server reset with PROTOCOL_ERROR (a
// new connection's streams are sent before its server's limit is known; seen once in six runs of
// TestLogsClientDialsOnceForWaitingStreams) is sent again, up to refusedTries times; other
// requests and errors are not; a server without HTTP/2 turns the transport to the fallback for
// good.
func TestLogsClientSendsARefusedGetAgain(t *testing.T) {
	refused := http2.StreamError{StreamID: 113, Code: http2.ErrCodeProtocol}
	for _, tc := range []struct {
		name                string
		method              string
		errs                []error
		wantOK              bool
		wantH2, wantBackups int
	}{
		{"refused once", http.MethodGet, []error{refused}, true, 2, 0},
		{"refused every time", http.MethodGet, []error{refused, refused, refused}, false, refusedTries, 0},
		{"a POST refused", http.MethodPost, []error{refused}, false, 1, 0},
		{"another error", http.MethodGet, []error{io.ErrUnexpectedEOF}, false, 1, 0},
		{"REFUSED_STREAM (x/net's own retry)", http.MethodGet, []error{http2.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream}}, false, 1, 0},
		{"no HTTP/2", http.MethodGet, []error{errNoH2}, true, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h2, fallback := &answers{errs: tc.errs}, &answers{}
			rt := &h2First{h2: h2, fallback: fallback}
			req, _ := http.NewRequest(tc.method, "https://127.0.0.1/api/v1/namespaces/ns/pods/pod/log", nil)
			resp, err := rt.RoundTrip(req)
			if ok := err == nil && resp.StatusCode == http.StatusOK; ok != tc.wantOK || h2.calls != tc.wantH2 || fallback.calls != tc.wantBackups {
				t.Errorf("RoundTrip = %v, %v after %d HTTP/2 and %d fallback tries; want ok %t after %d and %d",
					resp, err, h2.calls, fallback.calls, tc.wantOK, tc.wantH2, tc.wantBackups)
			}
		})
	}
}
