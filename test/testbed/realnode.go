package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The real node's identity: its name, and the label and taint (same key and value) that keep every
// pod but those that ask for it (RealNode.Pods) away from it.
const (
	RealNodeName       = "jobvault-real-node"
	RealNodeLabel      = "jobvault.io/testbed-node"
	RealNodeLabelValue = "real"
)

// RealNodeOptions are the kubelet's settings a test binary chooses for its real node.
type RealNodeOptions struct {
	// LogMaxSize is containerLogMaxSize ("10Mi" if empty; "1Mi" is the smallest the kubelet takes
	// in practice for quick tests), LogMaxFiles containerLogMaxFiles (5 if 0).
	LogMaxSize  string
	LogMaxFiles int32
	// LogMonitorInterval is containerLogMonitorInterval, how often the kubelet checks log sizes
	// and rotates (10 s if 0; at least 3 s): a file grows past LogMaxSize until the next check.
	LogMonitorInterval time.Duration
	// The container GC settings (flags only): --minimum-container-ttl-duration (0, the kubelet's
	// default), --maximum-dead-containers-per-container (1 if 0) and --maximum-dead-containers
	// (-1, no limit, if 0). The kubelet runs its container GC every minute, a fixed period.
	MinContainerTTL     time.Duration
	MaxDeadPerContainer int
	MaxDeadContainers   int
	// CrashLoopMaxBackoff, when set, caps CrashLoopBackOff's delay (the kubelet's alpha
	// KubeletCrashLoopBackOffMax, crashLoopBackOff.maxContainerRestartPeriod; at least 1 s):
	// by default the delay doubles from 10 s to 5 min, 150 s of waiting for four restarts.
	CrashLoopMaxBackoff time.Duration
}

func (o RealNodeOptions) withDefaults() RealNodeOptions {
	if o.LogMaxSize == "" {
		o.LogMaxSize = "10Mi"
	}
	if o.LogMaxFiles == 0 {
		o.LogMaxFiles = 5
	}
	if o.LogMonitorInterval == 0 {
		o.LogMonitorInterval = 10 * time.Second
	}
	if o.MaxDeadPerContainer == 0 {
		o.MaxDeadPerContainer = 1
	}
	if o.MaxDeadContainers == 0 {
		o.MaxDeadContainers = -1
	}
	return o
}

// RealNode is a real node beside KWOK's: the kubelet of the cluster's version with containerd and
// runc from Debian's packages, registered to the testbed's API server. Its pods run the images the
// testbed builds (PauseImage, WorkloadImage).
type RealNode struct {
	Name    string
	Options RealNodeOptions
	// Containerd and Kubelet are the node's processes.
	Containerd, Kubelet *Process
	// StartedIn is how long the node took to start, images included.
	StartedIn time.Duration

	env               *Env
	dir, socket       string
	port, healthzPort int
	host              *hostState
	lock              *os.File
}

var (
	realNodeOnce once[*RealNode]
	// realNodeOpts are the options the binary's real node was asked for first.
	realNodeOpts RealNodeOptions
)

// RealNode returns the binary's real node, starting it on first use (once per test binary, like
// the control plane) with opts; every later call must ask for the same options. A machine that
// cannot run it fails the test with the reason.
func (e *Env) RealNode(t T, opts RealNodeOptions) *RealNode {
	t.Helper()
	opts = opts.withDefaults()
	n, err := realNodeOnce.get("real node (containerd, kubelet "+Versions["KUBE_VERSION"]+")", func() (*RealNode, error) {
		realNodeOpts = opts
		return e.startRealNode(opts)
	})
	if err != nil {
		t.Fatal(err)
	}
	if opts != realNodeOpts {
		t.Fatalf("testbed: the real node runs with %+v; this test asks for %+v (one set of options per test binary)", realNodeOpts, opts)
	}
	return n
}

// realNodeTools are the programs the node needs from Debian's packages.
var realNodeTools = []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip",
	filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")}

// checkRealNodeHost says why this machine cannot run the node, if it cannot.
func checkRealNodeHost() error {
	if os.Geteuid() != 0 {
		return errors.New("testbed: the real node needs root (the kubelet and runc manage cgroups, mounts and network namespaces)")
	}
	for _, tool := range realNodeTools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("testbed: the real node needs %s: apt-get install containerd runc containernetworking-plugins (.ci/run does): %w", tool, err)
		}
	}
	return nil
}

func (e *Env) startRealNode(opts RealNodeOptions) (n *RealNode, err error) {
	t0 := time.Now()
	if err := checkRealNodeHost(); err != nil {
		return nil, err
	}
	kubelet, err := Binary("kubelet", "KUBE_VERSION")
	if err != nil {
		return nil, err
	}
	n = &RealNode{Name: RealNodeName, Options: opts, env: e, dir: filepath.Join(WorkDir(), "realnode")}
	n.socket = filepath.Join(n.dir, "containerd", "containerd.sock")
	if n.port, err = freePort(); err != nil {
		return nil, err
	}
	if n.healthzPort, err = freePort(); err != nil {
		return nil, err
	}
	if n.lock, err = lockHost(10 * time.Minute); err != nil {
		return nil, err
	}
	if n.host, err = saveHost(n.dir, n.socket); err != nil {
		n.lock.Close()
		return nil, err
	}
	// From here on the machine is changed: whatever happens, the stop puts it back.
	onStop(n.stop)
	if err := addNodeIP(); err != nil {
		return nil, err
	}
	if err := n.writeConfigs(); err != nil {
		return nil, err
	}
	if err := n.startContainerd(); err != nil {
		return nil, err
	}
	if err := n.importImages(); err != nil {
		return nil, err
	}
	kubeconfig, err := e.nodeIdentity(n.Name)
	if err != nil {
		return nil, err
	}
	if n.Kubelet, err = startProcess("kubelet", exec.Command(kubelet, n.kubeletArgs(kubeconfig)...)); err != nil {
		return nil, err
	}
	if err := n.Kubelet.waitFor(2*time.Minute, n.ready); err != nil {
		return nil, err
	}
	n.StartedIn = time.Since(t0)
	return n, nil
}

// startContainerd runs containerd with its configuration and waits until it answers.
func (n *RealNode) startContainerd() error {
	p, err := startProcess("containerd", exec.Command("containerd", "--config", filepath.Join(n.dir, "containerd.toml")))
	if err != nil {
		return err
	}
	n.Containerd = p
	return p.waitFor(time.Minute, func() error {
		if out, err := n.ctr("version"); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
}

// nodeIdentity writes a kubeconfig for the node's kubelet (system:node:<name> in system:nodes)
// and binds it to the system:node ClusterRole: the testbed's API server runs RBAC only, without
// the Node authorizer.
func (e *Env) nodeIdentity(node string) (string, error) {
	user := "system:node:" + node
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "testbed-" + node},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := e.Client.Create(context.Background(), binding); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("testbed: bind the real node's kubelet to system:node: %w", err)
	}
	u, err := e.env.AddUser(envtest.User{Name: user, Groups: []string{"system:nodes"}}, nil)
	if err != nil {
		return "", fmt.Errorf("testbed: add the real node's kubelet user: %w", err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	p := filepath.Join(WorkDir(), "kubeconfig-"+node)
	return p, os.WriteFile(p, b, 0o600)
}

// ready: the kubelet's health check passes and its node is Ready with its label and taint.
func (n *RealNode) ready() error {
	if err := getOK(&http.Client{Timeout: time.Second}, "http://127.0.0.1:"+strconv.Itoa(n.healthzPort)+"/healthz")(); err != nil {
		return err
	}
	var node corev1.Node
	if err := n.env.Client.Get(context.Background(), client.ObjectKey{Name: n.Name}, &node); err != nil {
		return err
	}
	if node.Labels[RealNodeLabel] != RealNodeLabelValue || len(node.Spec.Taints) == 0 {
		return fmt.Errorf("node %s registered without its label or taint", n.Name)
	}
	if !nodeReady(&node) {
		return fmt.Errorf("node %s not ready: %v", n.Name, node.Status.Conditions)
	}
	return nil
}

// stop stops the kubelet, ends every container, stops containerd and puts the machine back as it
// was found.
func (n *RealNode) stop() {
	if n.Kubelet != nil {
		n.Kubelet.Stop()
	}
	// Containers outlive the kubelet and containerd (their shims hold them): end them first.
	if err := killPodProcesses(); err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
	}
	if n.Containerd != nil {
		n.Containerd.Stop()
	}
	if err := n.host.restore(); err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
	}
	// The node object stays: the API server stops right after, with the run.
	n.lock.Close()
}

// Pods makes the task's pods run on the real node, each container named in containers (init
// containers too) running the workload image with that Workload; containers not named write
// nothing and exit 0. Every container records what it wrote (Written).
func (n *RealNode) Pods(containers map[string]Workload) PodOption {
	return func(p *corev1.PodTemplateSpec) {
		p.Spec.NodeSelector = map[string]string{RealNodeLabel: RealNodeLabelValue}
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: RealNodeLabel, Operator: corev1.TolerationOpEqual,
			Value: RealNodeLabelValue, Effect: corev1.TaintEffectNoSchedule})
		p.Spec.AutomountServiceAccountToken = ptr.To(false)
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "record", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: n.recordDir(), Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}})
		for _, list := range []*[]corev1.Container{&p.Spec.InitContainers, &p.Spec.Containers} {
			for i := range *list {
				c := &(*list)[i]
				c.Image, c.ImagePullPolicy = WorkloadImage, corev1.PullNever
				c.Args = containers[c.Name].args(c.Name)
				c.Env = append(c.Env,
					corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					corev1.EnvVar{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}})
				c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "record", MountPath: "/record"})
			}
		}
	}
}

func (n *RealNode) recordDir() string { return filepath.Join(n.dir, "records") }

// PodLogsDir is the kubelet's podLogsDir: where the node agent reads the CRI log files.
func (n *RealNode) PodLogsDir() string { return filepath.Join(n.dir, "pod-logs") }

// Written is what the container of pod podUID (in ns) wrote in its run (restart count) run, in
// the order written, both streams; nil if that run wrote nothing or never started.
func (n *RealNode) Written(ns, podUID, container string, run int32) []byte {
	b, _ := os.ReadFile(filepath.Join(n.recordDir(), ns, podUID, fmt.Sprintf("%s-%d.all", container, run)))
	return b
}

// WrittenStream is Written for one stream, "stdout" or "stderr".
func (n *RealNode) WrittenStream(ns, podUID, container string, run int32, stream string) []byte {
	b, _ := os.ReadFile(filepath.Join(n.recordDir(), ns, podUID, fmt.Sprintf("%s-%d.%s", container, run, stream)))
	return b
}

// Runs is how many runs of the container of pod podUID started (each records its output).
func (n *RealNode) Runs(ns, podUID, container string) int {
	m, _ := filepath.Glob(filepath.Join(n.recordDir(), ns, podUID, container+"-*.all"))
	return len(m)
}

// LogRequests is how many log requests (pods/log, through the API server or not) for the
// container of pod ns/name the kubelet has finished serving, from its request log: a follow
// stream counts once it ends.
func (n *RealNode) LogRequests(t T, ns, pod, container string) int {
	t.Helper()
	b, err := os.ReadFile(n.Kubelet.LogPath)
	if err != nil {
		t.Fatalf("testbed: read the kubelet's log: %v", err)
	}
	return bytes.Count(b, []byte("/containerLogs/"+ns+"/"+pod+"/"+container+"?"))
}

// Collected reports whether the kubelet has removed every log file of pod ns/name (uid), as its
// container GC does for a deleted pod's stopped containers, whatever its finalizers; true also if
// the pod never had a log.
func (n *RealNode) Collected(ns, pod, uid string) bool {
	found := false
	_ = filepath.WalkDir(filepath.Join(n.PodLogsDir(), ns+"_"+pod+"_"+uid), func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			found = true
		}
		return nil
	})
	return !found
}

// Workload is what a container of the workload image (test/workload) does: it writes Bytes over
// For, a chunk every Every (100 ms if 0), in lines whose lengths cycle through Lines (100 bytes if
// empty), to Stream ("stdout", "stderr" or "both", alternating lines; stdout if empty), the last
// line without its newline if NoFinalNewline, after Delay of quiet; then it stays running for Hold and exits with Exit
// (only its first ExitRuns runs if ExitRuns > 0, later runs with 0: a crash loop that ends).
// On SIGTERM it writes TermBytes over TermFor and exits with TermExit (143 if 0).
type Workload struct {
	Bytes          int64
	For, Every     time.Duration
	Lines          []int
	Stream         string
	NoFinalNewline bool
	Hold           time.Duration
	Delay          time.Duration
	Exit           int
	ExitRuns       int
	TermBytes      int64
	TermFor        time.Duration
	TermExit       int
}

// args are the workload program's flags for w in the container named name.
func (w Workload) args(name string) []string {
	a := []string{"-name=" + name, "-bytes=" + strconv.FormatInt(w.Bytes, 10), "-for=" + w.For.String(),
		"-hold=" + w.Hold.String(), "-delay=" + w.Delay.String(), "-exit=" + strconv.Itoa(w.Exit),
		"-term-bytes=" + strconv.FormatInt(w.TermBytes, 10), "-term-for=" + w.TermFor.String()}
	if w.Every > 0 {
		a = append(a, "-every="+w.Every.String())
	}
	if len(w.Lines) > 0 {
		s := ""
		for i, l := range w.Lines {
			if i > 0 {
				s += ","
			}
			s += strconv.Itoa(l)
		}
		a = append(a, "-lines="+s)
	}
	if w.Stream != "" {
		a = append(a, "-stream="+w.Stream)
	}
	if w.NoFinalNewline {
		a = append(a, "-no-final-newline")
	}
	if w.ExitRuns > 0 {
		a = append(a, "-exit-runs="+strconv.Itoa(w.ExitRuns))
	}
	if w.TermExit != 0 {
		a = append(a, "-term-exit="+strconv.Itoa(w.TermExit))
	}
	return a
}
