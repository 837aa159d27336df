package testbed

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	busv1alpha1 "volcano.sh/apis/pkg/apis/bus/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

//go:embed crds kwok/stages.yaml
var assets embed.FS

// Env is the shared control plane: kube-apiserver and etcd, the Volcano CRDs, the real Volcano
// scheduler and job controller, and KWOK running pods on fake nodes and serving their logs.
type Env struct {
	Config         *rest.Config // cluster-admin
	Client         client.Client
	Scheme         *runtime.Scheme
	KubeconfigPath string // cluster-admin kubeconfig file, for kubectl and the Volcano/KWOK processes

	Scheduler, Controller, KWOK, ControllerManager *Process
	// VolcanoWebhook is Volcano's admission webhook (vc-webhook-manager), registered with the
	// configurations of Volcano's Helm chart, as every Volcano installation runs it.
	VolcanoWebhook *Process

	env     *envtest.Environment
	logsDir string
	// node is every fake node's kubelet endpoint: it serves the node runtime's logs and passes
	// the rest to KWOK's server.
	node *nodeEndpoint
}

var clusterOnce once[*Env]

// Scheme returns a scheme with client-go's types and Volcano's batch, bus and scheduling types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, batchv1alpha1.AddToScheme,
		busv1alpha1.AddToScheme, schedulingv1beta1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// Cluster returns the shared control plane, starting it on first use.
func Cluster(t T) *Env {
	t.Helper()
	e, err := clusterOnce.get("control plane (kube-apiserver, etcd, kube-controller-manager, KWOK, Volcano)", startCluster)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// writeAssets copies the embedded CRDs and KWOK stages into the work dir.
func writeAssets(dir string) error {
	return fs.WalkDir(assets, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		out := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
}

// controlPlaneBinaries links kube-apiserver, etcd and kubectl into one dir for envtest.
func controlPlaneBinaries(dir string) error {
	apiserver, err := Binary("kube-apiserver", "KUBE_VERSION")
	if err != nil {
		return err
	}
	etcd, err := Binary("etcd", "ETCD_VERSION")
	if err != nil {
		return err
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return fmt.Errorf("testbed part kubectl: not on PATH: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Symlink(kubectl, filepath.Join(dir, "kubectl")); err != nil {
		return err
	}
	// envtest starts these itself, without a parent-death signal: a test binary killed by its
	// -timeout panic or SIGKILL would leave them running. setpriv (util-linux) execs them with one.
	setpriv, _ := exec.LookPath("setpriv")
	for name, src := range map[string]string{"kube-apiserver": apiserver, "etcd": etcd} {
		if setpriv == "" {
			if err := os.Symlink(src, filepath.Join(dir, name)); err != nil {
				return err
			}
			continue
		}
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, src)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func startCluster() (*Env, error) {
	work := WorkDir()
	if err := writeAssets(filepath.Join(work, "assets")); err != nil {
		return nil, fmt.Errorf("testbed: write assets: %w", err)
	}
	bin := filepath.Join(work, "bin")
	if err := controlPlaneBinaries(bin); err != nil {
		return nil, err
	}
	e := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths: []string{
			filepath.Join(work, "assets", "crds", "volcano"),
			filepath.Join(work, "assets", "crds", "kwok"),
		},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		// SIGTERM, then SIGKILL this much later, as a kubelet stops a pod at the end of its grace
		// period. Open pods/log streams hold the API server's graceful shutdown for up to its
		// request timeout (a minute): RestartAPIServer usually ends in the kill.
		ControlPlaneStopTimeout: apiServerGrace,
		Scheme:                  Scheme(),
	}
	api := e.ControlPlane.GetAPIServer()
	// A directory of our own, not envtest's temporary one: envtest removes that one on Stop, and a
	// restart (RestartAPIServer) would mint new serving certificates no client trusts.
	api.CertDir = filepath.Join(work, "kube-apiserver")
	if err := os.MkdirAll(api.CertDir, 0o700); err != nil {
		return nil, err
	}
	// pods/log must reach KWOK on 127.0.0.1; no node-lifecycle controller runs to lift the
	// not-ready taint, and no service-account controller creates tokens.
	api.Configure().Set("kubelet-preferred-address-types", "InternalIP")
	api.Configure().Set("disable-admission-plugins", "ServiceAccount,TaintNodesByCondition")
	// Aggregated APIs (jobvault's archive API) are reached through the front proxy.
	if err := configureFrontProxy(api, filepath.Join(work, "front-proxy")); err != nil {
		return nil, fmt.Errorf("testbed part kube-apiserver: front-proxy certificates: %w", err)
	}
	if err := configureAudit(api, filepath.Join(work, "audit")); err != nil {
		return nil, fmt.Errorf("testbed part kube-apiserver: audit: %w", err)
	}
	api.Out, api.Err = logFile("kube-apiserver")
	e.ControlPlane.Etcd = &envtest.Etcd{}
	e.ControlPlane.Etcd.Out, e.ControlPlane.Etcd.Err = logFile("etcd")

	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("testbed part kube-apiserver/etcd failed to start: %w (logs: %s)", err, filepath.Join(work, "kube-apiserver.log"))
	}
	onStop(func() { _ = e.Stop() })
	env := &Env{Config: cfg, Scheme: e.Scheme, env: e, logsDir: filepath.Join(work, "pod-logs")}
	if env.Client, err = client.New(cfg, client.Options{Scheme: env.Scheme}); err != nil {
		return nil, err
	}
	admin, err := e.AddUser(envtest.User{Name: "testbed-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return nil, err
	}
	env.KubeconfigPath = filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(env.KubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	if err := env.startControllerManager(); err != nil {
		return nil, err
	}
	if err := env.startKWOK(); err != nil {
		return nil, err
	}
	if err := env.startVolcano(); err != nil {
		return nil, err
	}
	if err := env.startVolcanoWebhook(); err != nil {
		return nil, err
	}
	return env, nil
}

func logFile(name string) (*os.File, *os.File) {
	f, err := os.Create(filepath.Join(WorkDir(), name+".log"))
	if err != nil {
		return nil, nil
	}
	return f, f
}

// startControllerManager runs kube-controller-manager with the controllers a cluster's deletions
// depend on: the garbage collector (background and foreground cascades, as real users delete
// jobs) and the namespace controller (test namespaces really go away), and the ClusterRole
// aggregation controller (a ClusterRole labelled to aggregate to view, as jobvault's archive API
// ships one, extends the view role as in a cluster).
func (e *Env) startControllerManager() error {
	bin, err := Binary("kube-controller-manager", "KUBE_VERSION")
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	p, err := startProcess("kube-controller-manager", exec.Command(bin, "--kubeconfig", e.KubeconfigPath,
		"--authentication-kubeconfig", e.KubeconfigPath, "--authorization-kubeconfig", e.KubeconfigPath,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--controllers=garbagecollector,namespace,clusterrole-aggregation", "--concurrent-gc-syncs=5", "-v=1"))
	if err != nil {
		return err
	}
	onStop(p.Stop)
	e.ControllerManager = p
	// /healthz needs no authorization by default; the serving certificate is self-signed.
	insecure := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a local test process
	return p.waitFor(60*time.Second, getOK(insecure, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz"))
}

// Nodes are the names of the fake nodes KWOK manages.
var Nodes = []string{"kwok-node-0", "kwok-node-1"}

func (e *Env) startKWOK() error {
	bin, err := Binary("kwok", "KWOK_VERSION")
	if err != nil {
		return err
	}
	server, err := freePort()
	if err != nil {
		return err
	}
	e.node = startNodeEndpoint(server)
	onStop(e.node.stop)
	cmd := exec.Command(bin, "--kubeconfig", e.KubeconfigPath,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--server-address=127.0.0.1:"+strconv.Itoa(server), "--node-ip=127.0.0.1", "--node-port="+strconv.Itoa(e.node.port()),
		"--enable-crds=Logs,ClusterLogs", "--config", filepath.Join(WorkDir(), "assets", "kwok", "stages.yaml"))
	p, err := startProcess("kwok", cmd)
	if err != nil {
		return err
	}
	onStop(p.Stop)
	e.KWOK = p
	ctx := context.Background()
	for _, name := range Nodes {
		if err := e.Client.Create(ctx, e.fakeNode(name)); err != nil && !apierrors.IsAlreadyExists(err) {
			return p.failure(fmt.Errorf("create node %s: %w", name, err))
		}
	}
	return p.waitFor(60*time.Second, func() error {
		for _, name := range Nodes {
			var n corev1.Node
			if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
				return err
			}
			if !nodeReady(&n) {
				return fmt.Errorf("node %s not ready", name)
			}
		}
		return nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func fakeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("3000"), // Follow1000 at 5,000 containers runs them on two nodes
	}
}

func (e *Env) startVolcano() error {
	sched, err := Binary("vc-scheduler", "VOLCANO_VERSION")
	if err != nil {
		return err
	}
	ctrl, err := Binary("vc-controller-manager", "VOLCANO_VERSION")
	if err != nil {
		return err
	}
	var ports [4]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	s, err := startProcess("vc-scheduler", exec.Command(sched, "--kubeconfig", e.KubeconfigPath,
		"--leader-elect=false", "--listen-address="+addr(ports[0]), "--healthz-address="+addr(ports[1]),
		"--enable-healthz=true", "--schedule-period=200ms", "--cache-dumper=false", "--plugins-dir="+filepath.Join(WorkDir(), "no-plugins"), "-v=2"))
	if err != nil {
		return err
	}
	onStop(s.Stop)
	e.Scheduler = s
	c, err := startProcess("vc-controller-manager", exec.Command(ctrl, "--kubeconfig", e.KubeconfigPath,
		"--leader-elect=false", "--healthz-address="+addr(ports[2]), "--enable-healthz=true", "-v=2"))
	if err != nil {
		return err
	}
	onStop(c.Stop)
	e.Controller = c
	ctx := context.Background()
	// The scheduler creates the default queue itself; jobs are only enqueued once it is open.
	if err := s.waitFor(60*time.Second, func() error {
		var q schedulingv1beta1.Queue
		if err := e.Client.Get(ctx, client.ObjectKey{Name: "default"}, &q); err != nil {
			return err
		}
		return httpOK("http://" + addr(ports[1]) + "/healthz")()
	}); err != nil {
		return err
	}
	return c.waitFor(60*time.Second, httpOK("http://"+addr(ports[2])+"/healthz"))
}

// UserConfig returns a client config authenticated as user with groups (by client certificate),
// bound to cluster-admin by RBAC so that only the identity differs from the admin's.
func (e *Env) UserConfig(t T, user string, groups ...string) *rest.Config {
	t.Helper()
	u, err := e.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		t.Fatalf("testbed: add user %s: %v", user, err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "testbed-admin-" + sanitize(user, 40)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := e.Client.Create(context.Background(), crb); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("testbed: bind %s to cluster-admin: %v", user, err)
	}
	return u.Config()
}

// UserKubeconfig writes a kubeconfig authenticating as user with groups (by client certificate)
// and returns its path. Unlike UserConfig it grants nothing: bind the roles the user needs.
func (e *Env) UserKubeconfig(t T, user string, groups ...string) string {
	t.Helper()
	u, err := e.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		t.Fatalf("testbed: add user %s: %v", user, err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		t.Fatalf("testbed: kubeconfig of %s: %v", user, err)
	}
	// The name's hash keeps apart users whose names share their first 40 characters (the
	// ServiceAccounts jobvault-system:jobvault-archiver and jobvault-system:jobvault-api do).
	sum := sha256.Sum256([]byte(user))
	p := filepath.Join(WorkDir(), fmt.Sprintf("kubeconfig-%s-%x", sanitize(user, 40), sum[:4]))
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Namespace creates a fresh namespace for the test and deletes it when the test ends.
func (e *Env) Namespace(t T) string {
	t.Helper()
	return e.namespace(t, nil)
}

// NamespaceWithoutVolcanoAdmission is Namespace for objects that Volcano's admission webhook must
// not see (it carries VolcanoAdmissionOffLabel from its creation, so it is never seen without).
// Volcano's job validation refuses a VcJob whose queue does not exist; a benchmark that keeps
// Volcano from running its jobs that way needs this.
func (e *Env) NamespaceWithoutVolcanoAdmission(t T) string {
	t.Helper()
	return e.namespace(t, map[string]string{VolcanoAdmissionOffLabel: "off"})
}

func (e *Env) namespace(t T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: sanitize(t.Name(), 40) + "-", Labels: labels}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("testbed: create namespace: %v", err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), ns) })
	return ns.Name
}
