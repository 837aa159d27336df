package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// The deployment manifests under config/: every kustomization renders, its objects pass the real
// API server's validation and admission (server-side dry run, with the restricted Pod Security
// level warning on the namespace), the objects refer to each other correctly, the archiver's
// arguments are flags the real binary accepts, and its RBAC grants exactly what pkg/archiver uses.

// deployNamespace is where config/ installs jobvault.
const deployNamespace = "jobvault-system"

// certManagerGroup's objects cannot be dry-run: the testbed has no cert-manager CRDs, and
// installing stand-in CRDs would validate nothing. They are checked for kind and references
// instead (checkCertManagerRefs).
const certManagerGroup = "cert-manager.io"

// clusterScoped are the kinds config/ may render without a namespace.
var clusterScoped = []string{"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
	"ValidatingWebhookConfiguration", "CustomResourceDefinition", "ClusterIssuer", "PriorityClass", "APIService"}

// builtinRoles are the roles every cluster has, which config/ binds without rendering them: an
// aggregated API server's delegated authentication and authorization (config/apiserver).
var builtinRoles = []string{"ClusterRole/system:auth-delegator", "Role/extension-apiserver-authentication-reader"}

// kubeSystemObject reports the one object config/ puts in kube-system: the archive API's
// RoleBinding to extension-apiserver-authentication-reader, which lies there.
func kubeSystemObject(o *unstructured.Unstructured) bool {
	role, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
	return o.GetKind() == "RoleBinding" && o.GetNamespace() == "kube-system" && role == "extension-apiserver-authentication-reader"
}

// agentNamespace is where config/agent installs the node agent: the Pod Security level of
// jobvault-system refuses its hostPath volume.
const agentNamespace = "jobvault-agent"

func configDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(testbed.ModuleRoot(), "config"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// kustomizations lists the directories under config/ holding a Kustomization (not a Component,
// which is only applied through another), relative to config/ with forward slashes.
func kustomizations(t *testing.T) []string {
	t.Helper()
	root := configDir(t)
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch d.Name() {
		case "kustomization.yaml", "kustomization.yml", "Kustomization":
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var k struct{ Kind string }
		if err := yaml.Unmarshal(b, &k); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if k.Kind == "Component" {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dirs = append(dirs, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func isCertManager(o *unstructured.Unstructured) bool {
	return o.GroupVersionKind().Group == certManagerGroup
}

// kubectl runs kubectl against the testbed with stdin, returning stdout and stderr.
func kubectl(t *testing.T, env *testbed.Env, stdin []byte, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "kubectl", append([]string{"--kubeconfig", env.KubeconfigPath}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func toYAMLStream(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes()
}

// ensureDeployNamespace creates jobvault-system as config/default renders it (with its Pod
// Security labels, so the dry runs warn about any pod template that would be rejected) unless it
// exists.
func ensureDeployNamespace(t *testing.T, env *testbed.Env) {
	t.Helper()
	ensureNamespace(t, env, "default", deployNamespace)
}

// ensureNamespace creates the namespace name as config/<dir> renders it unless it exists. It is
// kept for the test binary's life, as the later tests find it: the same rendering each time, and
// deleting a namespace waits seconds for its finalization (six times a run, 31 s in all).
func ensureNamespace(t *testing.T, env *testbed.Env, dir, name string) {
	t.Helper()
	rendered := find(stack.Kustomize(t, dir), "Namespace", name)
	if rendered == nil {
		t.Fatalf("config/%s renders no Namespace %s", dir, name)
	}
	ns := &corev1.Namespace{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(rendered.Object, ns); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// TestDeployManifests renders every kustomization under config/ and dry-runs its objects against
// the testbed's API server with server-side apply, as `kubectl apply --server-side` would install
// them.
func TestDeployManifests(t *testing.T) {
	env := testbed.Cluster(t)
	dirs := kustomizations(t)
	for _, want := range []string{"agent", "apiserver/base", "apiserver/certmanager", "archiver", "certmanager", "default", "overlays/gcs", "overlays/s3", "overlays/sharded", "selfsigned", "webhook"} {
		if !slices.Contains(dirs, want) {
			t.Errorf("config/%s has no kustomization (found %q)", want, dirs)
		}
	}
	ensureDeployNamespace(t, env)
	ensureNamespace(t, env, "agent", agentNamespace)

	for _, dir := range dirs {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			objs := stack.Kustomize(t, dir)
			checkNamespaces(t, objs)
			checkReferences(t, objs)
			checkCertManagerRefs(t, objs)
			checkArchiverDeployment(t, dir, objs)
			checkAgentDaemonSet(t, objs)
			dryRunApply(t, env, "config/"+dir, objs)
		})
	}
}

// dryRunApply applies what's objects to the testbed's API server with server-side apply in dry-run
// mode, and fails on any error or warning. The cert-manager and Prometheus Operator objects are
// left out: the testbed has neither's CRDs.
func dryRunApply(t *testing.T, env *testbed.Env, what string, objs []*unstructured.Unstructured) {
	t.Helper()
	var apply []*unstructured.Unstructured
	for _, o := range objs {
		if !isCertManager(o) && !isMonitoring(o) {
			apply = append(apply, o)
		}
	}
	stdout, stderr, err := kubectl(t, env, toYAMLStream(t, apply),
		"apply", "--server-side", "--dry-run=server", "--field-manager=jobvault-deploy-test", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl apply --server-side --dry-run=server (%s): %v\n%s%s", what, err, stdout, stderr)
	}
	// Warnings are failures: a Pod Security violation of the namespace's restricted level, a
	// deprecated API, an unknown field dropped.
	if strings.Contains(stderr, "Warning") {
		t.Errorf("%s: the API server warned:\n%s", what, stderr)
	}
	if n := strings.Count(stdout, "(server dry run)"); n != len(apply) {
		t.Errorf("%s: %d of %d objects applied:\n%s", what, n, len(apply), stdout)
	}
}

// checkNamespaces: every namespaced object lands in jobvault-system, or every one in
// jobvault-agent for the node agent's kustomization (which renders that Namespace).
func checkNamespaces(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	want := deployNamespace
	if find(objs, "Namespace", agentNamespace) != nil {
		want = agentNamespace
	}
	for _, o := range objs {
		ns := o.GetNamespace()
		if slices.Contains(clusterScoped, o.GetKind()) {
			if ns != "" {
				t.Errorf("cluster-scoped %s %s has namespace %q", o.GetKind(), o.GetName(), ns)
			}
			continue
		}
		if ns != want && !kubeSystemObject(o) {
			t.Errorf("%s %s is in namespace %q, want %s", o.GetKind(), o.GetName(), ns, want)
		}
	}
}

// workloads are the Deployments, StatefulSets (config/overlays/sharded's archiver) and DaemonSets
// (config/agent's) rendered.
func workloads(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	return slices.Concat(ofKind(objs, "Deployment"), ofKind(objs, "StatefulSet"), ofKind(objs, "DaemonSet"))
}

// checkReferences: every ServiceAccount a workload runs as or a binding names is rendered, every
// binding's role is rendered, and every Service selects the pods of exactly one workload (the
// webhook's Service must never send admission requests to the archiver).
func checkReferences(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, d := range workloads(objs) {
		sa, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName")
		if sa == "" || find(objs, "ServiceAccount", sa) == nil {
			t.Errorf("Deployment %s runs as ServiceAccount %q, which is not rendered", d.GetName(), sa)
		}
	}
	for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
		for _, b := range ofKind(objs, kind) {
			roleKind, _, _ := unstructured.NestedString(b.Object, "roleRef", "kind")
			roleName, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
			if find(objs, roleKind, roleName) == nil && !slices.Contains(builtinRoles, roleKind+"/"+roleName) {
				t.Errorf("%s %s refers to %s %s, which is not rendered", kind, b.GetName(), roleKind, roleName)
			}
			subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
			for _, s := range subjects {
				s := s.(map[string]any)
				if s["kind"] == "ServiceAccount" {
					if sa := find(objs, "ServiceAccount", fmt.Sprint(s["name"])); sa == nil || sa.GetNamespace() != s["namespace"] {
						t.Errorf("%s %s binds ServiceAccount %v/%v, which is not rendered", kind, b.GetName(), s["namespace"], s["name"])
					}
				}
			}
		}
	}
	for _, svc := range ofKind(objs, "Service") {
		sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		var selected []string
		for _, d := range workloads(objs) {
			podLabels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
			if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(podLabels)) {
				selected = append(selected, d.GetName())
			}
		}
		if len(selected) != 1 {
			t.Errorf("Service %s selects the pods of Deployments %q, want exactly one", svc.GetName(), selected)
		}
	}
}

// checkCertManagerRefs: the cert-manager objects are of known kinds and fit together: every
// Certificate's issuer is rendered, the webhook configuration's inject-ca-from names a rendered
// Certificate, and the webhook Deployment mounts that Certificate's Secret.
func checkCertManagerRefs(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var certs []*unstructured.Unstructured
	for _, o := range objs {
		if !isCertManager(o) {
			continue
		}
		switch o.GetKind() {
		case "Certificate":
			certs = append(certs, o)
			issuerKind, _, _ := unstructured.NestedString(o.Object, "spec", "issuerRef", "kind")
			issuerName, _, _ := unstructured.NestedString(o.Object, "spec", "issuerRef", "name")
			if issuer := find(objs, issuerKind, issuerName); issuer == nil || !isCertManager(issuer) {
				t.Errorf("Certificate %s is issued by %s %s, which is not rendered", o.GetName(), issuerKind, issuerName)
			}
		case "Issuer", "ClusterIssuer":
		default:
			t.Errorf("unexpected cert-manager object %s %s", o.GetKind(), o.GetName())
		}
	}
	for _, mwc := range ofKind(objs, "MutatingWebhookConfiguration") {
		from, ok := mwc.GetAnnotations()["cert-manager.io/inject-ca-from"]
		if !ok {
			continue
		}
		ns, name, _ := strings.Cut(from, "/")
		cert := find(certs, "Certificate", name)
		if cert == nil || cert.GetNamespace() != ns {
			t.Errorf("MutatingWebhookConfiguration %s injects the CA of Certificate %s, which is not rendered", mwc.GetName(), from)
			continue
		}
		secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		if !deploymentMountsSecret(objs, "jobvault-webhook", secret) {
			t.Errorf("Certificate %s writes Secret %s, which Deployment jobvault-webhook does not mount", name, secret)
		}
	}
}

func deploymentMountsSecret(objs []*unstructured.Unstructured, deployment, secret string) bool {
	d := find(objs, "Deployment", deployment)
	if d == nil {
		return false
	}
	volumes, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	for _, v := range volumes {
		if name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); name == secret {
			return true
		}
	}
	return false
}

// archiverContainer returns the archiver Deployment's (or sharded StatefulSet's) container, nil if
// dir renders none.
func archiverContainer(t *testing.T, objs []*unstructured.Unstructured) (*corev1.PodSpec, *corev1.Container) {
	t.Helper()
	d := find(objs, "Deployment", "jobvault-archiver")
	if d == nil {
		d = find(objs, "StatefulSet", "jobvault-archiver")
	}
	if d == nil {
		return nil, nil
	}
	spec := podTemplate(t, d)
	for i := range spec.Containers {
		if spec.Containers[i].Name == "archiver" {
			return spec, &spec.Containers[i]
		}
	}
	t.Fatalf("Deployment jobvault-archiver has no container archiver")
	return nil, nil
}

// podTemplate is a workload's pod spec.
func podTemplate(t *testing.T, workload *unstructured.Unstructured) *corev1.PodSpec {
	t.Helper()
	spec := &corev1.PodSpec{}
	raw, _, _ := unstructured.NestedMap(workload.Object, "spec", "template", "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// checkArchiverDeployment: the store each kustomization selects, files named by flags are mounted,
// the database settings come from the Secret, and the container runs locked down.
func checkArchiverDeployment(t *testing.T, dir string, objs []*unstructured.Unstructured) {
	t.Helper()
	spec, c := archiverContainer(t, objs)
	if c == nil {
		return
	}
	if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "archiver" {
		t.Errorf("archiver command %q: want the archiver program (the image holds both)", c.Command)
	}
	wantBackend := map[string]string{"overlays/s3": "s3", "overlays/gcs": "gcs", "overlays/sharded": "s3"}[dir]
	if wantBackend == "" {
		wantBackend = "fs"
	}
	if !slices.Contains(c.Args, "--store-backend="+wantBackend) {
		t.Errorf("archiver args %q lack --store-backend=%s", c.Args, wantBackend)
	}
	pvc := find(objs, "PersistentVolumeClaim", "jobvault-archive") != nil
	if pvc != (wantBackend == "fs") {
		t.Errorf("PersistentVolumeClaim jobvault-archive rendered: %v, with the %s store", pvc, wantBackend)
	}
	for _, a := range c.Args {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasSuffix(name, "-file") && name != "store-fs-root" {
			continue
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			if value == m.MountPath || strings.HasPrefix(value, strings.TrimSuffix(m.MountPath, "/")+"/") {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("--%s=%s is not under any volume mount of the archiver", name, value)
		}
	}
	envFromSecret := map[string]bool{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			envFromSecret[e.Name] = true
		}
	}
	for _, want := range []string{"JOBVAULT_DB_DSN", "PGPASSWORD"} {
		if !envFromSecret[want] {
			t.Errorf("archiver env %s is not taken from a Secret", want)
		}
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--db-dsn") || strings.Contains(strings.ToLower(a), "password") || strings.Contains(a, "secret-key=") {
			t.Errorf("archiver arg %q carries a secret on the command line", a)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("archiver securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, drop ALL", sc)
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("archiver pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	probes := map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe}
	for path, p := range probes {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "health" {
			t.Errorf("archiver probe for %s: %+v", path, p)
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["health"] != 8081 || ports["metrics"] != 8080 ||
		!slices.Contains(c.Args, "--health-probe-bind-address=:8081") || !slices.Contains(c.Args, "--metrics-bind-address=:8080") {
		t.Errorf("archiver ports %v and args %q disagree: want health 8081, metrics 8080", ports, c.Args)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("archiver resources %+v: want memory request and limit", c.Resources)
	}
}

// TestDeployArchiverFlags runs the real archiver binary with the arguments of every rendered
// archiver Deployment followed by -help: the flag package parses every argument before it
// reaches -help, so exit 0 proves each is a flag of archiver/main.go with a well-formed value.
func TestDeployArchiverFlags(t *testing.T) {
	bin := testbed.GoBuild(t, "./archiver")
	for _, dir := range kustomizations(t) {
		_, c := archiverContainer(t, stack.Kustomize(t, dir))
		if c == nil {
			continue
		}
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), bin, append(slices.Clone(c.Args), "-help")...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("archiver %s -help: %v\n%s", strings.Join(c.Args, " "), err, flagError(string(out)))
			}
		})
	}
}

// flagError keeps the flag package's error, the first line, before the usage text.
func flagError(out string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return first
}

// TestDeployArchiverRBAC installs the archiver's ServiceAccount and RBAC from config/default for
// real and asks the API server (SubjectAccessReview) what the ServiceAccount may do: everything
// pkg/archiver and its leader election do, and nothing next to it.
func TestDeployArchiverRBAC(t *testing.T) {
	env := testbed.Cluster(t)
	ensureDeployNamespace(t, env)
	var rbac []*unstructured.Unstructured
	for _, o := range stack.Kustomize(t, "default") {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if strings.HasPrefix(o.GetName(), "jobvault-archiver") {
				rbac = append(rbac, o)
			}
		}
	}
	if len(rbac) != 5 {
		t.Fatalf("config/default renders %d archiver RBAC objects, want ServiceAccount, ClusterRole(Binding), Role(Binding)", len(rbac))
	}
	stream := toYAMLStream(t, rbac)
	if out, errOut, err := kubectl(t, env, stream, "apply", "--server-side", "--field-manager=jobvault-deploy-test", "-f", "-"); err != nil {
		t.Fatalf("apply archiver RBAC: %v\n%s%s", err, out, errOut)
	}
	t.Cleanup(func() {
		for _, o := range rbac {
			if err := env.Client.Delete(context.Background(), o); client.IgnoreNotFound(err) != nil {
				t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	})

	const user = "system:serviceaccount:" + deployNamespace + ":jobvault-archiver"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"}
	type access struct {
		verb, group, resource, subresource, namespace, name string
	}
	const teamNS = "team-a" // any namespace a VcJob runs in
	allowed := []access{
		// VcJobs: cache (list, watch, cluster-wide), backstop and finalize (patch).
		{"list", "batch.volcano.sh", "jobs", "", "", ""},
		{"watch", "batch.volcano.sh", "jobs", "", "", ""},
		{"get", "batch.volcano.sh", "jobs", "", teamNS, "train"},
		{"patch", "batch.volcano.sh", "jobs", "", teamNS, "train"},
		// Pods: cache, finalizer and release annotation, deletion of a deleted job's pods, logs.
		{"list", "", "pods", "", "", ""},
		{"watch", "", "pods", "", "", ""},
		{"get", "", "pods", "", teamNS, "train-worker-0"},
		{"patch", "", "pods", "", teamNS, "train-worker-0"},
		{"delete", "", "pods", "", teamNS, "train-worker-0"},
		{"get", "", "pods", "log", teamNS, "train-worker-0"},
		// Nodes: is a pod's node lost?
		{"get", "", "nodes", "", "", "node-1"},
		// Events on jobs and pods, and on the lease.
		{"create", "", "events", "", teamNS, ""},
		{"patch", "", "events", "", teamNS, "train.123"},
		{"create", "", "events", "", deployNamespace, ""},
		// Leader election.
		{"create", "coordination.k8s.io", "leases", "", deployNamespace, ""},
		{"get", "coordination.k8s.io", "leases", "", deployNamespace, "jobvault-archiver"},
		{"update", "coordination.k8s.io", "leases", "", deployNamespace, "jobvault-archiver"},
	}
	denied := []access{
		{"create", "batch.volcano.sh", "jobs", "", teamNS, ""},
		{"update", "batch.volcano.sh", "jobs", "", teamNS, "train"},
		{"delete", "batch.volcano.sh", "jobs", "", teamNS, "train"},
		{"patch", "batch.volcano.sh", "jobs", "status", teamNS, "train"},
		{"create", "", "pods", "", teamNS, ""},
		{"update", "", "pods", "", teamNS, "train-worker-0"},
		{"deletecollection", "", "pods", "", teamNS, ""},
		{"patch", "", "pods", "status", teamNS, "train-worker-0"},
		{"create", "", "pods", "exec", teamNS, "train-worker-0"},
		{"create", "", "pods", "eviction", teamNS, "train-worker-0"},
		{"get", "", "secrets", "", teamNS, "db"},
		{"list", "", "secrets", "", deployNamespace, ""},
		{"get", "", "configmaps", "", teamNS, "cfg"},
		{"delete", "", "events", "", teamNS, "train.123"},
		{"list", "", "nodes", "", "", ""},
		{"patch", "", "nodes", "", "", "node-1"},
		{"get", "coordination.k8s.io", "leases", "", "kube-system", "kube-scheduler"},
		{"update", "coordination.k8s.io", "leases", "", deployNamespace, "another-lease"},
		{"delete", "coordination.k8s.io", "leases", "", deployNamespace, "jobvault-archiver"},
		{"create", "coordination.k8s.io", "leases", "", teamNS, ""},
		{"patch", "scheduling.volcano.sh", "podgroups", "", teamNS, "train"},
	}
	check := func(a access) bool {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource,
				Subresource: a.subresource, Namespace: a.namespace, Name: a.name},
		}}
		if err := env.Client.Create(t.Context(), sar); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		return sar.Status.Allowed
	}
	describe := func(a access) string {
		r := a.resource
		if a.subresource != "" {
			r += "/" + a.subresource
		}
		if a.group != "" {
			r += "." + a.group
		}
		return fmt.Sprintf("%s %s %s/%s", a.verb, r, a.namespace, a.name)
	}
	for _, a := range allowed {
		if !check(a) {
			t.Errorf("the archiver may not %s, which it needs", describe(a))
		}
	}
	for _, a := range denied {
		if check(a) {
			t.Errorf("the archiver may %s, which it does not need", describe(a))
		}
	}
}
