package stack

import (
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/test/testbed"
)

var aggregationOnce sync.Once

// TenantClient is a client for user, bound to the ClusterRole edit in ns only, as a tenant is.
// kube-controller-manager's clusterrole-aggregation controller fills edit's rules, as in a
// cluster (the testbed's own runs only the garbage collector and the namespace controller).
func TenantClient(t testing.TB, env *testbed.Env, ns, user string) client.Client {
	t.Helper()
	aggregationOnce.Do(func() { StartControllers(t, env, "kube-controller-manager-aggregation", "clusterrole-aggregation") })
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user + "-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if err := env.Client.Create(t.Context(), binding); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", env.UserKubeconfig(t, user, "tenants"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// Until the aggregation controller has filled edit, the tenant may do nothing.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var pods corev1.PodList
		err := c.List(t.Context(), &pods, client.InNamespace(ns))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant %s cannot list pods in %s after a minute: %v", user, ns, err)
		}
	}
	var other corev1.PodList
	if err := c.List(t.Context(), &other, client.InNamespace("default")); !apierrors.IsForbidden(err) {
		t.Fatalf("tenant %s may list pods outside %s (%v): not a tenant", user, ns, err)
	}
	return c
}

// StartControllers runs kube-controller-manager with only the given controllers (comma-separated),
// for the rest of the test process: those a cluster runs and the testbed's own
// kube-controller-manager does not.
func StartControllers(t testing.TB, env *testbed.Env, name, controllers string) {
	t.Helper()
	bin, err := testbed.Binary("kube-controller-manager", "KUBE_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	testbed.StartShared(t, name, exec.Command(bin, "--kubeconfig", env.KubeconfigPath,
		"--authentication-kubeconfig", env.KubeconfigPath, "--authorization-kubeconfig", env.KubeconfigPath,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(testbed.FreePort(t)),
		"--controllers="+controllers, "-v=1"))
}
