package plugin

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// gzipAPI is a fake archive API holding one archived job, train, whose log it sends gzip'd, as the
// real server passes a stored log of one gzip member through to a client that accepts gzip. It counts the log
// reads it answered each way.
type gzipAPI struct {
	log []byte
	mu  sync.Mutex
	gz  int // log reads answered with gzip
	raw int // log reads answered plain
}

func (a *gzipAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Vary", "Accept-Encoding")
	if !strings.HasSuffix(r.URL.Path, "/log") {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ArchivedJob","apiVersion":"archive.jobvault.io/v1alpha1","metadata":{"name":"train","namespace":"a","uid":"u1"},
			"status":{"archiveState":"archived","pods":[{"name":"train-worker-0","uid":"p1","createdAt":"2026-11-25T00:00:00Z","containers":[{"name":"main","type":"regular"}]}]}}`))
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		a.raw++
		_, _ = w.Write(a.log)
		return
	}
	a.gz++
	w.Header().Set("Content-Encoding", "gzip")
	zw := gzip.NewWriter(w)
	_, _ = zw.Write(a.log)
	_ = zw.Close()
}

// TestLogsReadGzip: kubectl jobvault logs and the viewer's download ask the API for gzip and
// print the log decompressed, byte for byte; a kubeconfig that disables compression reads it plain.
func TestLogsReadGzip(t *testing.T) {
	want := []byte("line 1\n\x1f\x8b not gzip, the log's own bytes\nlast line without newline")
	api := &gzipAPI{log: want}
	// TLS, as a cluster's: over plain HTTP client-go uses Go's default transport, whatever the
	// kubeconfig says of compression.
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	kubeconfig := []string{"--server", srv.URL, "--insecure-skip-tls-verify", "-n", "a"}

	var out, errOut bytes.Buffer
	code := Main(t.Context(), append(kubeconfig, "logs", "job/train"), genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	if code != 0 || !bytes.Equal(out.Bytes(), want) || api.gz != 1 {
		t.Errorf("logs: exit %d, %q (stderr %q), %d gzip'd reads; want the log decompressed from 1 gzip'd read", code, out.String(), errOut.String(), api.gz)
	}

	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := newViewer(&client{rest: cs.RESTClient(), namespace: "a"})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	v.routes().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/jobs/a/train/log/download?container=main", nil))
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), want) || w.Header().Get("Content-Encoding") != "" || api.gz != 2 {
		t.Errorf("download: %d, %q, Content-Encoding %q, %d gzip'd reads; want the log decompressed from a second gzip'd read", w.Code, w.Body.String(), w.Header().Get("Content-Encoding"), api.gz)
	}

	out.Reset()
	code = Main(t.Context(), append(kubeconfig, "--disable-compression", "logs", "job/train"), genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	if code != 0 || !bytes.Equal(out.Bytes(), want) || api.raw != 1 {
		t.Errorf("logs --disable-compression: exit %d, %q, %d plain reads; want the log read plain", code, out.String(), api.raw)
	}
}
