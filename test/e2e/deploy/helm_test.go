package deploy

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// The Helm chart under config/helm/jobvault renders, for each set of values below, exactly the
// objects of the config/ kustomizations those values stand for (less Helm's own labels and
// annotations, and but for what the API server and the programs read alike: see normalize), so that a change to one without the
// other fails here; its objects pass the real API server's dry run; it lints clean; and values it
// cannot honour are refused.

// chartDir is the chart, relative to config/.
const chartDir = "helm/jobvault"

// helmKubeVersion is the Kubernetes version the chart is rendered and linted for: the oldest its
// Chart.yaml allows (ValidatingAdmissionPolicy v1).
const helmKubeVersion = "v1.30.0"

// helmLabels are the labels the chart adds to every object and config/ does not have.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by"}

// helmAnnotations are the annotations for Helm itself that the chart adds and config/ does not
// have: the archive's claim is kept at uninstall.
var helmAnnotations = []string{"helm.sh/resource-policy"}

// helmCase is a set of values and the config/ kustomizations it renders: base's objects, less
// those of minus, plus those of plus (which win over base's of the same kind and name). A case
// without a base has no counterpart in config/ and is only dry-run.
type helmCase struct {
	name        string
	values      string
	base        string
	minus, plus []string
	// namespace is the release namespace, jobvault-system unless set; config/'s renders then have
	// jobvault-system replaced by it (its README names that string as what moving it rewrites).
	namespace string
}

var helmCases = []helmCase{
	{name: "default", base: "default"},
	{name: "s3", values: "store: {backend: s3}", base: "overlays/s3"},
	{name: "gcs", base: "overlays/gcs", values: `
store: {backend: gcs}
archiver:
  serviceAccount:
    annotations: {iam.gke.io/gcp-service-account: jobvault-archiver@PROJECT_ID.iam.gserviceaccount.com}`},
	{name: "sharded", values: "{store: {backend: s3}, archiver: {shards: 3}}", base: "overlays/sharded"},
	{name: "self-signed", values: "certificates: {source: self-signed}", base: "default",
		minus: []string{"certmanager"}, plus: []string{"selfsigned"}},
	{name: "no-policies", values: "policies: {enabled: false}", base: "default", minus: []string{"policy"}},
	{name: "monitoring-agent", values: "{store: {backend: s3}, monitoring: {enabled: true}, agent: {enabled: true}}",
		base: "overlays/s3", plus: []string{"monitoring", "agent"}},
	// Only for the dry run: config/ has no such kustomization (its README says "a patch of your
	// own").
	{name: "extras", values: `
store: {backend: gcs}
archiver:
  extraArgs: [--cluster-name=east]
  extraEnv: [{name: GOOGLE_APPLICATION_CREDENTIALS, value: /etc/jobvault/gcs/key.json}]
  extraVolumes: [{name: gcs-key, secret: {secretName: jobvault-archiver-gcs, defaultMode: 0440}}]
  extraVolumeMounts: [{name: gcs-key, mountPath: /etc/jobvault/gcs, readOnly: true}]`},
	{name: "other-namespace", namespace: "vault",
		values: "{store: {backend: s3}, archiver: {shards: 3}, monitoring: {enabled: true}, agent: {enabled: true}}",
		base:   "overlays/sharded", plus: []string{"monitoring", "agent"}},
}

func (c helmCase) releaseNamespace() string {
	if c.namespace == "" {
		return deployNamespace
	}
	return c.namespace
}

func (c helmCase) valueMap(t *testing.T) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(c.values))
	if err != nil {
		t.Fatalf("values of %s: %v", c.name, err)
	}
	return vals
}

// renderChart renders the chart with Helm's own engine, as `helm template --namespace ns` would,
// and returns its objects.
func renderChart(t *testing.T, values map[string]any, ns string) []*unstructured.Unstructured {
	t.Helper()
	out, err := renderChartText(t, values, ns)
	if err != nil {
		t.Fatal(err)
	}
	return stack.DecodeObjects(t, "the chart", out)
}

// renderChartText renders the chart into one YAML stream, its templates in name order.
func renderChartText(t *testing.T, values map[string]any, ns string) ([]byte, error) {
	t.Helper()
	quietHelm(t)
	chrt, err := loader.Load(filepath.Join(configDir(t), chartDir))
	if err != nil {
		return nil, fmt.Errorf("load the chart: %w", err)
	}
	kv, err := chartutil.ParseKubeVersion(helmKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	opts := chartutil.ReleaseOptions{Name: "jobvault", Namespace: ns, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(chrt, values, opts, caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(chrt, rv)
	if err != nil {
		return nil, fmt.Errorf("render the chart: %w", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		if strings.HasSuffix(name, ".yaml") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, name := range names {
		b.WriteString("\n---\n")
		b.WriteString(files[name])
	}
	return b.Bytes(), nil
}

// quietHelm discards the standard logger's output until the test ends: Helm's chart loader logs
// every symbolic link it follows, and the chart links config/'s policies, alerts and dashboard.
func quietHelm(t *testing.T) {
	w := log.Writer()
	log.SetOutput(io.Discard)
	t.Cleanup(func() { log.SetOutput(w) })
}

// expected is what config/ renders for c: base less minus plus plus, without the release
// namespace itself, which Helm expects to exist (helm install -n). With another namespace, every
// jobvault-system in the render becomes that namespace.
func (c helmCase) expected(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	byKey := map[string]*unstructured.Unstructured{}
	var order []string
	add := func(dir string) {
		for _, o := range stack.Kustomize(t, dir) {
			k := objectKey(o)
			if _, ok := byKey[k]; !ok {
				order = append(order, k)
			}
			byKey[k] = o
		}
	}
	add(c.base)
	for _, dir := range c.minus {
		for _, o := range stack.Kustomize(t, dir) {
			delete(byKey, objectKey(o))
		}
	}
	for _, dir := range c.plus {
		add(dir)
	}
	var objs []*unstructured.Unstructured
	for _, k := range order {
		if o, ok := byKey[k]; ok && !(o.GetKind() == "Namespace" && o.GetName() == deployNamespace) {
			objs = append(objs, o)
		}
	}
	if c.namespace == "" {
		return objs
	}
	stream := strings.ReplaceAll(string(toYAMLStream(t, objs)), deployNamespace, c.namespace)
	return stack.DecodeObjects(t, "config/ in namespace "+c.namespace, []byte(stream))
}

// helmClusterScoped are the kinds that have no namespace: clusterScoped, and the admission
// policies, which kustomize namespaces (config/policy/kustomization.yaml) and the API server does
// not.
var helmClusterScoped = slices.Concat(clusterScoped, []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"})

// objectKey names an object as the API server does: kind, namespace (if namespaced) and name.
func objectKey(o *unstructured.Unstructured) string {
	ns := o.GetNamespace()
	if slices.Contains(helmClusterScoped, o.GetKind()) {
		ns = ""
	}
	return o.GetKind() + " " + ns + "/" + o.GetName()
}

// normalize makes a rendered object comparable across the chart and kustomize: without Helm's
// labels and annotations, without a namespace on a cluster-scoped object, without null fields and
// empty lists (kustomize's empty caBundle, its volumes once patched away), with CEL's whitespace
// collapsed, and with each container's flags sorted after its leading arguments (the archiver's
// subcommand), since Go's flag package does not care about their order and kustomize's JSON
// patches append where a template writes in place.
func normalize(o *unstructured.Unstructured) map[string]any {
	obj := dropEmpty(o.DeepCopy().Object).(map[string]any)
	meta, _ := obj["metadata"].(map[string]any)
	dropKeys(meta, "labels", helmLabels)
	dropKeys(meta, "annotations", helmAnnotations)
	if slices.Contains(helmClusterScoped, o.GetKind()) {
		delete(meta, "namespace")
	}
	containers, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
	for _, c := range containers {
		c := c.(map[string]any)
		args, _ := c["args"].([]any)
		first := slices.IndexFunc(args, func(a any) bool { return strings.HasPrefix(fmt.Sprint(a), "-") })
		if first >= 0 {
			slices.SortFunc(args[first:], func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		}
	}
	if containers != nil {
		_ = unstructured.SetNestedSlice(obj, containers, "spec", "template", "spec", "containers")
	}
	return obj
}

// dropKeys deletes keys from the map m[field], and the field once it is empty.
func dropKeys(m map[string]any, field string, keys []string) {
	sub, ok := m[field].(map[string]any)
	if !ok {
		return
	}
	for _, k := range keys {
		delete(sub, k)
	}
	if len(sub) == 0 {
		delete(m, field)
	}
}

// celFields hold CEL, in which whitespace outside string literals means nothing.
var celFields = []string{"expression", "messageExpression"}

// dropEmpty removes null fields and empty lists (kustomize's, where a patch deleted every volume),
// which the API server reads as absent, and collapses the whitespace of CEL fields: kustomize's YAML
// parser reads a folded scalar's more-indented lines (config/policy's) with one blank line more
// than Helm's (sigs.k8s.io/yaml) does.
func dropEmpty(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if l, ok := e.([]any); e == nil || ok && len(l) == 0 {
				delete(v, k)
				continue
			}
			if s, ok := e.(string); ok && slices.Contains(celFields, k) {
				v[k] = strings.Join(strings.Fields(s), " ")
				continue
			}
			v[k] = dropEmpty(e)
		}
	case []any:
		for i, e := range v {
			v[i] = dropEmpty(e)
		}
	}
	return v
}

// TestHelmChartMatchesConfig renders the chart for every case and compares it, object by object,
// with the config/ kustomizations the case stands for.
func TestHelmChartMatchesConfig(t *testing.T) {
	for _, c := range helmCases {
		if c.base == "" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			got := map[string]map[string]any{}
			for _, o := range renderChart(t, c.valueMap(t), c.releaseNamespace()) {
				k := objectKey(o)
				if _, dup := got[k]; dup {
					t.Errorf("the chart renders %s twice", k)
				}
				got[k] = normalize(o)
			}
			want := map[string]map[string]any{}
			for _, o := range c.expected(t) {
				want[objectKey(o)] = normalize(o)
			}
			for k, w := range want {
				g, ok := got[k]
				if !ok {
					t.Errorf("config/ renders %s, the chart does not", k)
					continue
				}
				if diff := cmp.Diff(w, g); diff != "" {
					t.Errorf("%s differs between config/ and the chart (-config/ +chart):\n%s", k, diff)
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("the chart renders %s, config/ does not", k)
				}
			}
		})
	}
}

// TestHelmChartDryRun dry-runs the chart's objects of every case in jobvault-system against the
// testbed's API server, as TestDeployManifests does config/'s.
func TestHelmChartDryRun(t *testing.T) {
	env := testbed.Cluster(t)
	ensureDeployNamespace(t, env)
	ensureNamespace(t, env, "agent", agentNamespace)
	for _, c := range helmCases {
		if c.namespace != "" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			dryRunApply(t, env, "the chart with "+c.name+" values", renderChart(t, c.valueMap(t), deployNamespace))
		})
	}
}

// TestHelmChartLint runs Helm's linter (`helm lint`) on the chart with every case's values: no
// warning, no error.
func TestHelmChartLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(helmKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	quietHelm(t)
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(filepath.Join(configDir(t), chartDir), c.valueMap(t), c.releaseNamespace(), kv)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestHelmChartRefusesValues: values the chart cannot honour fail the render with a message that
// says why, rather than rendering an install that cannot work.
func TestHelmChartRefusesValues(t *testing.T) {
	for _, c := range []struct{ name, values, want string }{
		{"unknown backend", "store: {backend: ftp}", "/store/backend"},
		{"unknown certificate source", "certificates: {source: letsencrypt}", "/certificates/source"},
		{"shards on a volume", "archiver: {shards: 3}", "archiver.shards > 1 needs a store every shard reaches"},
		{"agent on a volume", "agent: {enabled: true}", "agent.enabled needs a bucket"},
		{"agent in the release namespace", "{store: {backend: s3}, agent: {enabled: true, namespace: jobvault-system}}",
			"agent.namespace must not be the release namespace"},
		{"no shard", "archiver: {shards: 0}", "/archiver/shards"},
		{"unknown value", "store: {bucket: logs}", "/store"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(c.values))
			if err != nil {
				t.Fatal(err)
			}
			out, err := renderChartText(t, vals, deployNamespace)
			if err == nil {
				t.Fatalf("the chart renders with %s:\n%.400s", c.values, out)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("the chart refuses %s with %q, want it to name %q", c.values, err, c.want)
			}
		})
	}
}

// TestHelmChartMonitoringLabels: monitoring.labels reach the PrometheusRule and the PodMonitor
// (what a Prometheus selects them by), and nothing else of them changes.
func TestHelmChartMonitoringLabels(t *testing.T) {
	vals, err := chartutil.ReadValues([]byte("monitoring: {enabled: true, labels: {release: kube-prometheus-stack}}"))
	if err != nil {
		t.Fatal(err)
	}
	objs := renderChart(t, vals, deployNamespace)
	config := stack.Kustomize(t, "monitoring")
	for _, kind := range []string{"PrometheusRule", "PodMonitor"} {
		o := find(objs, kind, "jobvault")
		if o == nil {
			t.Fatalf("the chart renders no %s jobvault", kind)
		}
		if got := o.GetLabels()["release"]; got != "kube-prometheus-stack" {
			t.Errorf("%s jobvault has label release=%q, want kube-prometheus-stack", kind, got)
		}
		l := o.GetLabels()
		delete(l, "release")
		o.SetLabels(l)
		if diff := cmp.Diff(normalize(find(config, kind, "jobvault")), normalize(o)); diff != "" {
			t.Errorf("%s jobvault differs from config/monitoring's but for the label (-config/ +chart):\n%s", kind, diff)
		}
	}
}
