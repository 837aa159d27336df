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
)

// logServer is a TLS server answering pods/log requests with one line, then holding the stream
// open until the test ends, as a followed container's log does. It takes maxStreams streams a
// connection over HTTP/2 (the API server's default is 100), or HTTP/1.1 only.
type logServer struct {
	*httptest.Server
	conns   atomic.Int64 // connections accepted
	release chan struct{}
}

func newLogServer(t *testing.T, h2 bool, maxStreams uint32) *logServer {
	t.Helper()
	s := &logServer{release: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	if n := s.conns.Load(); n < 3 {
		t.Errorf("3 log streams over HTTP/1.1 opened %d connections, want one each", n)
	}
}

// TestLogsClientUsesClientGoWhereItMust: a configuration with a proxy, a dialer or an
// authentication plugin keeps client-go's transport.
func TestLogsClientUsesClientGoWhereItMust(t *testing.T) {
	for name, edit := range map[string]func(*rest.Config){
		"proxy":  func(c *rest.Config) { c.Proxy = http.ProxyFromEnvironment },
		"dialer": func(c *rest.Config) { c.Dial = (&net.Dialer{}).DialContext },
		"plain":  func(c *rest.Config) { c.Host, c.TLSClientConfig = "http://127.0.0.1:1", rest.TLSClientConfig{} },
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewTLSServer(http.NotFoundHandler())
			t.Cleanup(srv.Close)
			cfg := (&logServer{Server: srv}).config()
			edit(cfg)
			rt, err := logsTransport(cfg)
			if err != nil || rt != nil {
				t.Errorf("logsTransport = %T, %v; want none (client-go's)", rt, err)
			}
		})
	}
}
