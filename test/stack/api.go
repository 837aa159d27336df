package stack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/jobvault/jobvault/certs/certgen"
	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/test/testbed"
)

// TB is what StartAPI and LoginRole need of their caller: a test's testing.TB, or the demo's
// runner, which runs the same parts outside `go test`.
type TB interface {
	testbed.T
	Context() context.Context
	Errorf(format string, args ...any)
	TempDir() string
}

// APIUser is the identity the archive API server runs as, with config/apiserver's RBAC.
const APIUser = "system:serviceaccount:jobvault-system:jobvault-api"

// API is the archive API server (archiver/apiserver) of a rig, registered with the aggregator.
type API struct {
	Proc *testbed.Process
	Port int
}

// StartAPI runs the apiserver program for the rig's database, as the read-only jobvault_reader role,
// and store, serving on 127.0.0.1 with a certificate minted into the test's temp dir, and
// registers it as archive.jobvault.io/v1alpha1 (an ExternalName Service of localhost, as the
// testbed reaches aggregated servers). It runs as APIUser with the RBAC of config/apiserver for
// delegated authentication and authorization, and installs config/apiserver's view ClusterRole.
// The APIService is the cluster's: one test at a time may start an API.
func StartAPI(t TB, s *Rig) *API {
	t.Helper()
	kubeconfig := apiIdentity(t, s.Env)
	ca, err := certgen.NewCA("jobvault-api-test-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue(certgen.Options{Service: "jobvault-api", Namespace: "jobvault-system"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := serving.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	a := &API{Port: testbed.FreePort(t)}
	args := []string{"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(a.Port),
		"--tls-cert-file=" + filepath.Join(dir, certgen.CertFile), "--tls-private-key-file=" + filepath.Join(dir, certgen.KeyFile),
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--db-dsn=" + LoginRole(t, s.DSN, "jobvault_reader")}
	for _, arg := range s.Args {
		// The rig's store; the records say where each object lies, so no prefix.
		if strings.HasPrefix(arg, "--store-") && !strings.HasPrefix(arg, "--store-prefix") {
			args = append(args, arg)
		}
	}
	cmd := exec.Command(testbed.GoBuild(t, "./archiver/apiserver"), args...)
	cmd.Env = append(os.Environ(), s.Environ...)
	a.Proc = testbed.Start(t, "apiserver", cmd)
	s.Env.RegisterAPIService(t, testbed.APIService{Group: v1alpha1.GroupName, Version: v1alpha1.SchemeGroupVersion.Version,
		Port: a.Port, Service: "jobvault-api", Namespace: "jobvault-system", CABundle: serving.CACert})
	return a
}

// apiIdentity binds APIUser as config/apiserver/base/rbac.yaml binds the ServiceAccount, installs
// the view ClusterRole and the gate of config/apiserver/base, and returns a kubeconfig for
// APIUser.
func apiIdentity(t TB, env *testbed.Env) string {
	t.Helper()
	ctx := context.Background()
	subject := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: APIUser}}
	objs := []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "jobvault-api-auth-delegator-testbed"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
			Subjects: subject},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "jobvault-api-auth-reader-testbed", Namespace: "kube-system"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
			Subjects: subject},
	}
	objs = append(objs, configObjects(t, "clusterrole_view.yaml", &rbacv1.ClusterRole{})...)
	objs = append(objs, configObjects(t, "gate.yaml", &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{})...)
	for _, obj := range objs {
		if err := env.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("apply %s: %v", obj.GetName(), err)
		}
	}
	return env.UserKubeconfig(t, APIUser, "system:serviceaccounts", "system:serviceaccounts:jobvault-system")
}

// configObjects decodes the YAML documents of config/apiserver/base/name, in order, into objs.
func configObjects(t testbed.T, name string, objs ...client.Object) []client.Object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testbed.ModuleRoot(), "config", "apiserver", "base", name))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(docs) != len(objs) {
		t.Fatalf("config/apiserver/base/%s holds %d documents, want %d", name, len(docs), len(objs))
	}
	for i, doc := range docs {
		if err := yaml.UnmarshalStrict([]byte(doc), objs[i]); err != nil {
			t.Fatalf("parse config/apiserver/base/%s: %v", name, err)
		}
	}
	return objs
}
