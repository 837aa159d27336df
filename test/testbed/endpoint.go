package testbed

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crilogs "k8s.io/cri-client/pkg/logs"
)

// nodeEndpoint is the kubelet endpoint of every fake node (its daemonEndpoints port): it serves
// pods/log of the node runtime's containers itself and passes every other request to KWOK's server.
//
// KWOK serves logs with the kubelet's reader (k8s.io/cri-client/pkg/logs.ReadLogs) and a runtime
// stub whose ContainerStatus always answers Unavailable, which the reader takes for "still
// running": its follow streams never end. A kubelet passes its container runtime instead, and the
// reader ends a follow at EOF once the container is not running. The endpoint does what the
// kubelet does: the same reader, of the cluster's kubelet version, with a ContainerStatus that
// answers from the node runtime whether the run followed still runs.
type nodeEndpoint struct {
	srv  *httptest.Server
	kwok *httputil.ReverseProxy

	mu       sync.Mutex
	runtimes map[*Runtime]bool
	// requests counts the pods/log requests served, by namespace/pod/container.
	requests map[string]int
}

// startNodeEndpoint serves the nodes' kubelet endpoint on 127.0.0.1, over TLS with a self-signed
// certificate as KWOK's (the API server does not verify kubelets' certificates here), passing
// what it does not serve to KWOK's server on kwokPort.
func startNodeEndpoint(kwokPort int) *nodeEndpoint {
	n := &nodeEndpoint{runtimes: map[*Runtime]bool{}, requests: map[string]int{}}
	n.kwok = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(kwokPort)})
		},
		FlushInterval: -1, // follow streams, exec and attach pass at once
	}
	n.srv = httptest.NewUnstartedServer(n)
	n.srv.StartTLS()
	return n
}

// stop ends the open streams (the API server's follows would hold Close for ever) and the server.
func (n *nodeEndpoint) stop() {
	n.srv.CloseClientConnections()
	n.srv.Close()
}

// port is the endpoint's port, the nodes' kubelet port.
func (n *nodeEndpoint) port() int {
	u, _ := url.Parse(n.srv.URL)
	p, _ := strconv.Atoi(u.Port())
	return p
}

// LogRequests is how many pods/log requests (follow or not, any run) the nodes' kubelet endpoint
// was asked for the container so far: a capture that reopens in a loop shows here.
func (e *Env) LogRequests(ns, pod, container string) int {
	e.node.mu.Lock()
	defer e.node.mu.Unlock()
	return e.node.requests[ns+"/"+pod+"/"+container]
}

// register adds a runtime whose pods' logs the endpoint serves; the returned func removes it.
func (n *nodeEndpoint) register(r *Runtime) func() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.runtimes[r] = true
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.runtimes, r)
	}
}

// source finds the runtime that runs the container and asks it what to read.
func (n *nodeEndpoint) source(ns, pod, container string, previous bool) (path string, running func() bool, known bool, err error) {
	n.mu.Lock()
	runtimes := make([]*Runtime, 0, len(n.runtimes))
	for r := range n.runtimes {
		runtimes = append(runtimes, r)
	}
	n.mu.Unlock()
	for _, r := range runtimes {
		if path, running, known, err = r.logSource(ns, pod, container, previous); known {
			return path, running, known, err
		}
	}
	return "", nil, false, nil
}

// ServeHTTP serves /containerLogs/{namespace}/{pod}/{container} of the runtime's containers as the
// kubelet's server does, and passes everything else to KWOK (pods given by SetPodLogFiles too).
func (n *nodeEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if r.Method != http.MethodGet || len(parts) != 4 || parts[0] != "containerLogs" {
		n.kwok.ServeHTTP(w, r)
		return
	}
	ns, pod, container := parts[1], parts[2], parts[3]
	n.mu.Lock()
	n.requests[ns+"/"+pod+"/"+container]++
	n.mu.Unlock()
	opts, err := podLogOptions(r.URL.Query())
	if err != nil {
		http.Error(w, `{"message": "Unable to decode query."}`, http.StatusBadRequest)
		return
	}
	path, running, known, err := n.source(ns, pod, container, opts.Previous)
	switch {
	case !known:
		n.kwok.ServeHTTP(w, r)
		return
	case err != nil:
		// The kubelet's WriteError: the error's text, without a newline.
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, err.Error())
		return
	}
	stdout, stderr := io.Writer(flushWriter{w}), io.Writer(flushWriter{w})
	if opts.Stream != nil { // PodLogsQuerySplitStreams: one stream only
		switch *opts.Stream {
		case corev1.LogStreamStdout:
			stderr = nil
		case corev1.LogStreamStderr:
			stdout = nil
		}
	}
	w.Header().Set("Transfer-Encoding", "chunked")
	// As the kubelet: a zero-byte write before reading, so the response starts even while the
	// reader waits for the container's first output.
	if _, err := (flushWriter{w}).Write(nil); err != nil {
		return
	}
	if _, err := os.Stat(path); err != nil {
		// Collected (container GC) while the pod is still in the API: the kubelet still has the
		// container's ID in its status, but its runtime no longer has the container. Its
		// ContainerStatus fails after the zero-byte write: the stream has started (200) and the
		// error's text is its body.
		_, _ = fmt.Fprintf(w, "unable to retrieve container logs for containerd://%x", sha256.Sum256([]byte(path)))
		return
	}
	err = crilogs.ReadLogs(r.Context(), nil, path, "", crilogs.NewLogOptions(opts, time.Now()), runStatus{running: running}, stdout, stderr)
	if err != nil && r.Context().Err() == nil {
		// The kubelet's server answers a failed read with WriteError(400, err): the stream has
		// started (200), so only the error's text goes, into its body.
		_, _ = io.WriteString(w, err.Error())
	}
}

// flushWriter flushes every write, as the kubelet's (k8s.io/apiserver's flushwriter).
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

// runStatus is the container runtime as the kubelet's log reader sees it: it asks only
// ContainerStatus, whether the container it follows still runs.
type runStatus struct {
	criapi.RuntimeService
	running func() bool
}

func (s runStatus) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	state := runtimeapi.ContainerState_CONTAINER_EXITED
	if s.running() {
		state = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: id, State: state}}, nil
}

// podLogOptions decodes pods/log's query as the kubelet does (tail is the old name of tailLines).
func podLogOptions(q url.Values) (*corev1.PodLogOptions, error) {
	o := &corev1.PodLogOptions{Container: q.Get("container")}
	if tail := q.Get("tail"); tail != "" && tail != "all" {
		q.Set("tailLines", tail)
	}
	// apimachinery's query booleans: "", "false" and "0" are false, anything else true.
	flag := func(k string) bool {
		v := strings.ToLower(q.Get(k))
		return v != "" && v != "false" && v != "0"
	}
	o.Follow, o.Previous, o.Timestamps = flag("follow"), flag("previous"), flag("timestamps")
	for k, dst := range map[string]**int64{"sinceSeconds": &o.SinceSeconds, "tailLines": &o.TailLines, "limitBytes": &o.LimitBytes} {
		if v := q.Get(k); v != "" {
			i, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parse %s: %w", k, err)
			}
			*dst = &i
		}
	}
	if v := q.Get("sinceTime"); v != "" {
		at, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, fmt.Errorf("parse sinceTime: %w", err)
		}
		o.SinceTime = &metav1.Time{Time: at}
	}
	if v := q.Get("stream"); v != "" {
		o.Stream = &v
	}
	return o, nil
}
