package testbed

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kwokNodeAnnotation marks the nodes KWOK manages (its --manage-nodes-with-annotation-selector).
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// fakeNode is a node KWOK manages, its kubelet endpoint the testbed's (nodeEndpoint) on 127.0.0.1.
func (e *Env) fakeNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
			Labels:      map[string]string{"kubernetes.io/hostname": name, "type": "kwok"},
		},
		Status: corev1.NodeStatus{
			Allocatable: fakeCapacity(), Capacity: fakeCapacity(),
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(e.node.port())}},
		},
	}
}

// AddNode adds a fake node of the test's own, ready when AddNode returns and deleted when the test
// ends. It is unschedulable, so that only pods the test binds to it (spec.nodeName) run there.
func (e *Env) AddNode(t T) string {
	t.Helper()
	name := "kwok-" + sanitize(t.Name(), 50)
	node := e.fakeNode(name)
	node.Spec.Unschedulable = true
	ctx := context.Background()
	if err := e.Client.Create(ctx, node); err != nil {
		t.Fatalf("testbed: add node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), node) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n corev1.Node
		if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err == nil && nodeReady(&n) {
			return name
		}
		if time.Now().After(deadline) {
			t.Fatalf("testbed: node %s not ready within 30s", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LoseNode makes a node gone as a failed machine is: KWOK stops managing it (no more heartbeats,
// no more stage changes to its pods), its Ready condition turns Unknown, and its kubelet endpoint
// points at a port that accepts connections and never answers, as a host behind a broken network.
// pods/log for its pods then fails or hangs as it does against a lost node. For a node of the
// test's own (AddNode): the loss is not undone.
func (e *Env) LoseNode(t T, name string) {
	t.Helper()
	blackhole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := blackhole.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		blackhole.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	ctx := context.Background()
	var n corev1.Node
	if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	delete(n.Annotations, kwokNodeAnnotation)
	if err := e.Client.Patch(ctx, &n, patch); err != nil {
		t.Fatalf("testbed: unmanage node %s: %v", name, err)
	}
	patch = client.MergeFrom(n.DeepCopy())
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(blackhole.Addr().(*net.TCPAddr).Port)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = corev1.ConditionUnknown
			n.Status.Conditions[i].Reason = "NodeStatusUnknown"
			n.Status.Conditions[i].Message = "Kubelet stopped posting node status."
			n.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	if err := e.Client.Status().Patch(ctx, &n, patch); err != nil {
		t.Fatalf("testbed: lose node %s: %v", name, err)
	}
	lostNodes.Store(name, true)
}

// lostNodes are the nodes LoseNode took: the node runtime writes nothing more for their pods.
var lostNodes sync.Map

// InotifyInstances reports how many inotify instances this user's processes hold and the
// machine's per-user limit (fs.inotify.max_user_instances). The kubelet's log reader, which the
// nodes' kubelet endpoint (and KWOK) serves logs with, takes one for each follow stream; past the limit it fails them with "failed
// to create fsnotify watcher: too many open files", on this shared machine as on a real node.
func InotifyInstances() (used, limit int) {
	b, _ := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	limit, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, dir := range procs {
		if st, err := os.Stat(dir); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
			continue
		}
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if target, _ := os.Readlink(filepath.Join(dir, fd.Name())); target == "anon_inode:inotify" {
				used++
			}
		}
	}
	return used, limit
}
