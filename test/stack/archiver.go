package stack

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/testbed"
)

// ArchiverUser is the identity the stack's archivers run as, with config/archiver's ClusterRole.
const ArchiverUser = "system:serviceaccount:jobvault-system:jobvault-archiver"

var (
	identityMu         sync.Mutex
	archiverKubeconfig string
)

// ArchiverIdentity binds config/archiver's ClusterRole, as the deployment does, to ArchiverUser
// and returns a kubeconfig for that user: archivers run with exactly the RBAC they ship with.
func ArchiverIdentity(t testbed.T, env *testbed.Env) string {
	t.Helper()
	identityMu.Lock()
	defer identityMu.Unlock()
	if archiverKubeconfig != "" {
		return archiverKubeconfig
	}
	raw, err := os.ReadFile(filepath.Join(testbed.ModuleRoot(), "config", "archiver", "clusterrole.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(raw, &role); err != nil {
		t.Fatalf("parse config/archiver's ClusterRole: %v", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-testbed"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: ArchiverUser}},
	}
	for _, obj := range []client.Object{&role, binding} {
		if err := env.Client.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("apply %s: %v", obj.GetName(), err)
		}
	}
	archiverKubeconfig = env.UserKubeconfig(t, ArchiverUser, "system:serviceaccounts", "system:serviceaccounts:jobvault-system")
	return archiverKubeconfig
}

// Archiver is one archiver process with its database and object store.
type Archiver struct {
	Env         *testbed.Env
	DSN         string
	StoreConfig objstore.Config
	// Args are the archiver's flags beyond the kubeconfig and probes; Environ its extra environment.
	Args, Environ []string
	// MetricsAddr is where the running archiver serves /metrics.
	MetricsAddr string
	Proc        *testbed.Process
	// Kubeconfig is the identity the archiver runs as: ArchiverIdentity's.
	Kubeconfig string
	// ReadyTimeout is how long Start waits for /readyz, a minute if zero: an archiver whose cache
	// holds 100,000 pods takes longer to sync on a loaded machine.
	ReadyTimeout time.Duration
}

// Options choose the archiver's store and scope.
type Options struct {
	// Backend is objstore.BackendFS (default), BackendS3 (the testbed's MinIO) or BackendGCS (the emulator).
	Backend string
	// FSRoot is the fs backend's directory.
	FSRoot string
	// Namespaces limits the archiver to these namespaces (so parallel stacks do not compete).
	Namespaces []string
	// Flags are extra archiver flags.
	Flags []string
}

// ArchiverApplication is the application_name the archivers of the tests connect to Postgres with,
// so that a test tells their sessions from its own (pg_stat_activity).
const ArchiverApplication = "jobvault-archiver"

// archiverDSN is dsn, a postgres:// URL, with ArchiverApplication as its application_name; any
// other form as it is.
func archiverDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return dsn
	}
	q := u.Query()
	q.Set("application_name", ArchiverApplication)
	u.RawQuery = q.Encode()
	return u.String()
}

// NewArchiver prepares (but does not start) an archiver writing to dsn and the chosen store under
// the prefix "archive".
func NewArchiver(t testbed.T, env *testbed.Env, dsn string, o Options) *Archiver {
	t.Helper()
	a := &Archiver{Env: env, DSN: dsn, Kubeconfig: ArchiverIdentity(t, env)}
	cfg := objstore.Config{Backend: o.Backend}
	switch o.Backend {
	case objstore.BackendS3:
		cfg.S3, a.Args, a.Environ = MinIOStore(testbed.MinIO(t))
	case objstore.BackendGCS:
		g := testbed.GCS(t)
		cfg.GCS = objstore.GCSConfig{Bucket: g.Bucket}
		a.Args = []string{"--store-backend=gcs", "--store-gcs-bucket=" + g.Bucket}
		a.Environ = []string{"STORAGE_EMULATOR_HOST=" + g.Host}
	default:
		cfg.Backend, cfg.FSRoot = objstore.BackendFS, o.FSRoot
		a.Args = []string{"--store-backend=fs", "--store-fs-root=" + o.FSRoot}
	}
	a.StoreConfig = cfg
	a.Args = append(a.Args, "--store-prefix=archive", "--db-dsn="+archiverDSN(dsn), "--leader-elect=false")
	if len(o.Namespaces) > 0 {
		a.Args = append(a.Args, "--namespaces="+strings.Join(o.Namespaces, ","))
	}
	a.Args = append(a.Args, o.Flags...)
	return a
}

// MinIOStore is a MinIO bucket of the testbed as objstore's configuration, and as the archiver's
// store flags and environment (the keys).
func MinIOStore(m testbed.S3) (cfg objstore.S3Config, args, environ []string) {
	cfg = objstore.S3Config{Endpoint: m.Endpoint, Bucket: m.Bucket, AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true}
	args = []string{"--store-backend=s3", "--store-s3-endpoint=" + m.Endpoint, "--store-s3-bucket=" + m.Bucket,
		"--store-s3-tls=false", "--store-s3-path-style"}
	environ = []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey}
	return cfg, args, environ
}

// Start runs the archiver binary and waits until it is ready (both backends answer).
func (a *Archiver) Start(t testbed.T) {
	t.Helper()
	probe := testbed.FreePort(t)
	a.MetricsAddr = "127.0.0.1:" + strconv.Itoa(testbed.FreePort(t))
	args := append([]string{"--kubeconfig=" + a.Kubeconfig, "--metrics-bind-address=" + a.MetricsAddr,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probe)}, a.Args...)
	cmd := exec.Command(testbed.GoBuild(t, "./archiver"), args...)
	cmd.Env = append(os.Environ(), a.Environ...)
	a.Proc = testbed.Start(t, "archiver", cmd)
	a.Proc.WaitReady(t, "http://127.0.0.1:"+strconv.Itoa(probe)+"/readyz", cmp.Or(a.ReadyTimeout, time.Minute))
}

// Store opens the archiver's store for reading back what it wrote.
func (a *Archiver) Store(t testbed.T) objstore.Store {
	t.Helper()
	if a.StoreConfig.Backend == objstore.BackendGCS {
		for _, e := range a.Environ {
			if v, ok := strings.CutPrefix(e, "STORAGE_EMULATOR_HOST="); ok {
				os.Setenv("STORAGE_EMULATOR_HOST", v)
			}
		}
	}
	s, err := objstore.New(context.Background(), a.StoreConfig)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ArgValue returns the value of the first of args that starts with prefix (e.g.
// "--store-s3-bucket="), "" if none does.
func ArgValue(args []string, prefix string) string {
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			return strings.TrimPrefix(a, prefix)
		}
	}
	return ""
}

// Metrics returns what the running archiver's /metrics serves.
func (a *Archiver) Metrics(t testbed.T) string {
	t.Helper()
	return scrape(t, "archiver", a.MetricsAddr)
}

// scrape returns what the /metrics endpoint at addr serves (of the program named what).
func scrape(t testbed.T, what, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("%s metrics: %v", what, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s metrics: %s %v", what, resp.Status, err)
	}
	return string(b)
}
