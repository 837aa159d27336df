package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// docCommand is one command line of a ```sh block in the README or a page of docs/.
type docCommand struct {
	page, section, line string
}

// commandPages are the pages whose commands must run as printed: the README and docs/'s pages.
// The design records are history, and the reference pages are generated.
func commandPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(moduleRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(moduleRoot, "README.md")}, pages...)
}

// docCommands are the command lines of the ```sh blocks of a page, comments cut, each with the
// heading it is under.
func docCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(moduleRoot, path)
	var out []docCommand
	section, inSh, inOther := "", false, false
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			if inSh || inOther {
				inSh, inOther = false, false
			} else if line == "```sh" {
				inSh = true
			} else {
				inOther = true
			}
		case inSh:
			line, _, _ = strings.Cut(line, " #")
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, docCommand{page: filepath.ToSlash(rel), section: section, line: line})
			}
		case !inOther && strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	return out
}

// runAsPrinted are the sections whose commands a test runs as printed, every line of their first
// ```sh block, and that test: its name, then its package's directory in parentheses.
var runAsPrinted = map[string]string{
	"docs/audit.md#Reading archives back":        "TestDemo (test/demo), logs commands",
	"docs/audit.md#Export":                       "TestDemo (test/demo), export commands",
	"docs/audit.md#Verify the chain":             "TestAuditVerifyDocExamples (test/integration/audit)",
	"docs/audit.md#Policy":                       "TestRetentionDocExample (test/e2e/policy)",
	"docs/install-helm.md#Install":               helmRun,
	"docs/install-helm.md#Values":                helmRun,
	"docs/install-helm.md#Upgrade and uninstall": helmRun,
}

// helmRun is the test that runs the Helm page's commands.
const helmRun = "TestHelmPageRunsAsPrinted (test/tools/docgen)"

// notYetRun are the sections whose commands no test runs as printed yet, and why: each is listed
// by this test's log, so that the gap stays in sight. None is, today.
var notYetRun = map[string]string{}

var (
	makeLine      = regexp.MustCompile(`^make( [A-Z_]+=\S+)*((?: [a-z][a-z0-9-]*)+)( [A-Z_]+=\S+)*$`)
	kustomizeLine = regexp.MustCompile(`^kubectl apply --server-side -k (\S+)$`)
	makeTarget    = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
)

// TestDocCommands: every command in a ```sh block of the README or docs/ runs as printed. A make
// target must exist; a kustomization must exist (test/e2e/deploy renders and dry-runs each one
// under config/); any other command must be in a section whose commands a named test runs as
// printed. A command that none of these covers fails, until a test runs it.
func TestDocCommands(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(moduleRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	n, ran := 0, map[string]bool{}
	for _, page := range commandPages(t) {
		for _, c := range docCommands(t, page) {
			n++
			where := c.page + "#" + c.section
			if m := makeLine.FindStringSubmatch(c.line); m != nil {
				for _, target := range strings.Fields(m[2]) {
					if !targets[target] {
						t.Errorf("%s: %q: the Makefile has no target %s", where, c.line, target)
					}
				}
				continue
			}
			if m := kustomizeLine.FindStringSubmatch(c.line); m != nil {
				if !strings.HasPrefix(m[1], "config/") {
					t.Errorf("%s: %q: applies %s, outside config/ that test/e2e/deploy dry-runs", where, c.line, m[1])
				} else if _, err := os.Stat(filepath.Join(moduleRoot, m[1], "kustomization.yaml")); err != nil {
					t.Errorf("%s: %q: no kustomization: %v", where, c.line, err)
				}
				continue
			}
			if test, ok := runAsPrinted[where]; ok {
				t.Logf("%s: %q: run as printed by %s", where, c.line, test)
				ran[where] = true
				continue
			}
			if why, ok := notYetRun[where]; ok {
				t.Logf("%s: %q: NOT run as printed: %s", where, c.line, why)
				continue
			}
			t.Errorf("%s: %q: no test runs it as printed; add one (and a rule here)", where, c.line)
		}
	}
	for where, test := range runAsPrinted {
		if !ran[where] {
			t.Errorf("%s: no such section with commands, yet %s is said to run them", where, test)
		}
		checkTestExists(t, test)
	}
	if n < 10 {
		t.Errorf("found %d commands in the README and docs/, want the quick start's, the install's and the audit examples", n)
	}
}

// runAsPrintedTest parses a runAsPrinted value: "TestName (dir)" and anything after.
var runAsPrintedTest = regexp.MustCompile(`^(Test\w+) \(([\w/.-]+)\)`)

// checkTestExists fails unless the test a runAsPrinted entry names is declared in its directory.
func checkTestExists(t *testing.T, test string) {
	t.Helper()
	m := runAsPrintedTest.FindStringSubmatch(test)
	if m == nil {
		t.Errorf("runAsPrinted names %q, want \"TestName (dir)\"", test)
		return
	}
	files, err := filepath.Glob(filepath.Join(moduleRoot, m[2], "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "\nfunc "+m[1]+"(t *testing.T) {") {
			return
		}
	}
	t.Errorf("runAsPrinted names %s, which %s does not declare", m[1], m[2])
}

// TestMain: the Helm page's commands run against the testbed's API server.
func TestMain(m *testing.M) { testbed.Main(m) }

// helmPage is the page TestHelmPageRunsAsPrinted runs.
const helmPage = "docs/install-helm.md"

// TestHelmPageRunsAsPrinted runs the ```sh blocks of docs/install-helm.md as printed, each with
// bash from the module's root, with the helm CLI of go.mod's Helm version and kubectl against the
// testbed's API server: the install with the defaults, the uninstall, the install with an S3 bucket,
// the agent and monitoring, and the uninstall again. What the page says they leave is checked
// after each. The prerequisites the page names are met as far as the commands need: the kinds of
// cert-manager and of the Prometheus Operator are installed (their CRDs with open schemas; their
// controllers do not run), and the variables the commands read are set.
func TestHelmPageRunsAsPrinted(t *testing.T) {
	env := testbed.Cluster(t)
	bin := t.TempDir()
	if err := os.Symlink(helmBinary(t), filepath.Join(bin, "helm")); err != nil {
		t.Fatal(err)
	}
	installKinds(t, env, []schema.GroupVersionKind{
		{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"},
		{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"},
		{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"},
		{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"},
	})
	root, err := filepath.Abs(moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	helmHome := t.TempDir()
	environ := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+env.KubeconfigPath,
		"HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"), "HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"),
		"HELM_DATA_HOME="+filepath.Join(helmHome, "data"), "PGPASSWORD=pg-secret", "ACCESS_KEY=access", "SECRET_KEY=secret")
	run := func(section string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", stack.DocBlock(t, helmPage, "## "+section, "sh"))
		cmd.Dir, cmd.Env = root, environ
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s#%s as printed: %v\n%s", helmPage, section, err, out)
		}
		t.Logf("%s#%s as printed:\n%s", helmPage, section, out)
	}
	const ns = "jobvault-system"
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})

	run("Install")
	mustExist(t, env, &appsv1.Deployment{}, ns, "jobvault-archiver")
	mustExist(t, env, &admissionregistrationv1.MutatingWebhookConfiguration{}, "", "jobvault-webhook")
	mustExist(t, env, &corev1.Secret{}, ns, "jobvault-archiver-db")

	run("Upgrade and uninstall")
	mustBeGone(t, env, &appsv1.Deployment{}, ns, "jobvault-archiver")
	mustBeGone(t, env, &admissionregistrationv1.MutatingWebhookConfiguration{}, "", "jobvault-webhook")
	mustExist(t, env, &corev1.PersistentVolumeClaim{}, ns, "jobvault-archive") // helm.sh/resource-policy: keep

	run("Values")
	var archiver appsv1.Deployment
	mustExist(t, env, &archiver, ns, "jobvault-archiver")
	if args := strings.Join(archiver.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--store-backend=s3") ||
		!strings.Contains(args, "--store-s3-bucket=my-archive") {
		t.Errorf("the archiver's args after the S3 install: %s, want the S3 store and bucket my-archive", args)
	}
	mustExist(t, env, &appsv1.DaemonSet{}, "jobvault-agent", "jobvault-agent")

	run("Upgrade and uninstall")
	mustBeGone(t, env, &appsv1.DaemonSet{}, "jobvault-agent", "jobvault-agent")
	mustBeGone(t, env, &corev1.Namespace{}, "", "jobvault-agent") // with the Secrets put there
	mustBeGone(t, env, &appsv1.Deployment{}, ns, "jobvault-archiver")
}

// mustExist gets the named object into obj, or fails the test.
func mustExist(t *testing.T, env *testbed.Env, obj client.Object, ns, name string) {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatalf("%T %s/%s: %v", obj, ns, name, err)
	}
}

// mustBeGone fails the test unless the named object is gone or being deleted (helm uninstall
// does not wait for finalizers, a namespace's included).
func mustBeGone(t *testing.T, env *testbed.Env, obj client.Object, ns, name string) {
	t.Helper()
	err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj)
	if err == nil && obj.GetDeletionTimestamp() == nil {
		t.Errorf("%T %s/%s is still there", obj, ns, name)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("%T %s/%s: %v", obj, ns, name, err)
	}
}

// installKinds installs a namespaced CRD with an open schema for each kind, and waits until each is
// established: the kinds another operator's chart would install, so that objects of them can be
// created; nothing acts on them.
func installKinds(t *testing.T, env *testbed.Env, kinds []schema.GroupVersionKind) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range kinds {
		plural := strings.ToLower(k.Kind) + "s"
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + "." + k.Group},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: k.Group, Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(k.Kind), Kind: k.Kind, ListKind: k.Kind + "List"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: k.Version, Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
			},
		}
		if err := c.Create(t.Context(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("install CRD %s: %v", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	deadline := time.Now().Add(time.Minute)
	for _, name := range names {
		for !established(t, c, name) {
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not established a minute after its creation", name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// established reports whether the named CRD's kind is served.
func established(t *testing.T, c client.Client, name string) bool {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &crd); err != nil {
		t.Fatalf("get CRD %s: %v", name, err)
	}
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// helmBinary is the helm CLI of the Helm version go.mod requires, built once into the testbed's
// cache (outside the work tree, as the testbed's parts are) and kept there between runs.
func helmBinary(t *testing.T) string {
	t.Helper()
	list := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Version}}", "helm.sh/helm/v3")
	list.Dir = moduleRoot
	out, err := list.Output()
	if err != nil {
		t.Fatalf("the Helm version of go.mod: %v", err)
	}
	version := strings.TrimSpace(string(out))
	path := filepath.Join(testbed.CacheDir(), "bin", "helm-"+version)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	// go install pkg@version builds it with Helm's own go.mod, outside this module, whose go.sum
	// lacks what only the CLI needs.
	gobin := t.TempDir()
	build := exec.CommandContext(t.Context(), "go", "install", "helm.sh/helm/v3/cmd/helm@"+version)
	build.Dir, build.Env = gobin, append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build helm %s: %v\n%s", version, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(gobin, "helm"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // another run may have put it there meanwhile: the same bytes
		t.Fatal(err)
	}
	return path
}
