package deploy

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// config/monitoring: the PrometheusRule's groups pass Prometheus' own rule parser (rulefmt, as the
// Prometheus Operator's admission webhook validates them), every alert has its summary,
// description, runbook (a heading of docs/operations.md) and severity, the dashboard shows every series the
// alerts watch, and every series either names is one that a running archiver and webhook serve
// on their /metrics.

// monitoringGroup's objects cannot be dry-run: the testbed has no Prometheus Operator CRDs. The
// PrometheusRule is checked by rulefmt instead, the PodMonitor by what it selects.
const monitoringGroup = "monitoring.coreos.com"

func isMonitoring(o *unstructured.Unstructured) bool {
	return o.GroupVersionKind().Group == monitoringGroup
}

// severities are the values of the alerts' severity label (the Prometheus Operator's and
// kube-prometheus' convention, which Alertmanager routes on).
var severities = []string{"critical", "warning"}

func TestMonitoring(t *testing.T) {
	objs := stack.Kustomize(t, "monitoring")
	rule, podMonitor, dashboard := find(objs, "PrometheusRule", "jobvault"), find(objs, "PodMonitor", "jobvault"), find(objs, "ConfigMap", "jobvault-dashboard")
	if rule == nil || podMonitor == nil || dashboard == nil {
		t.Fatalf("config/monitoring renders PrometheusRule %v, PodMonitor %v, ConfigMap jobvault-dashboard %v; want all",
			rule != nil, podMonitor != nil, dashboard != nil)
	}
	checkNamespaces(t, objs)

	alerts := checkRules(t, rule)
	ruleMetrics := sets.New[string]()
	for _, a := range alerts {
		ruleMetrics.Insert(a.metrics...)
	}
	if dashboard.GetLabels()["grafana_dashboard"] == "" {
		t.Errorf("ConfigMap jobvault-dashboard lacks the grafana_dashboard label Grafana's sidecar loads dashboards by")
	}
	dashMetrics := dashboardMetrics(t, dashboard)
	if missing := sets.List(ruleMetrics.Difference(dashMetrics)); len(missing) > 0 {
		t.Errorf("the dashboard does not show %q, which the alerts watch", missing)
	}
	checkPodMonitor(t, podMonitor)

	// What a running archiver and webhook export, once a job went through them (some series only
	// appear after an event: the webhook's per-path request counters, for one).
	s := stack.NewRig(t, objstore.BackendS3)
	job := testbed.Job(s.NS, "monitored").Task("worker", 1, []string{"main"}).Obj()
	stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "alice", job)
	s.WaitArchived(t, job, 2*time.Minute)
	// A node agent for a node without pods (config/agent), on the rig's database and store.
	agent := stack.StartAgent(t, s, "monitoring-node", t.TempDir())
	exported := exportedNames(t, s.Metrics(t)).Union(exportedNames(t, stack.WebhookMetrics(t))).Union(exportedNames(t, agent.Metrics(t)))
	if unknown := sets.List(ruleMetrics.Union(dashMetrics).Difference(exported)); len(unknown) > 0 {
		t.Errorf("config/monitoring names series that neither the archiver, the webhook nor the agent exports: %q", unknown)
	}
	// The check can fail: a name nobody exports is caught.
	if exported.Has("jobvault_archiver_no_such_series_total") || !exported.Has("jobvault_archiver_capture_lag_seconds_bucket") {
		t.Errorf("the exported names are not what /metrics serves: %d names", exported.Len())
	}

	// The gauges the alerts need most tell the truth in a real process: both backends up, nothing
	// held once the job is archived; during an outage of both, the job and its pod wait for their
	// release and both backends are down; afterwards, all is released.
	gauges := func() map[string]float64 { return gaugeValues(t, s.Metrics(t)) }
	want := func(what string, ok func(map[string]float64) bool) {
		t.Helper()
		var last map[string]float64
		err := wait.PollUntilContextTimeout(t.Context(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			last = gauges()
			return ok(last), nil
		})
		if err != nil {
			t.Fatalf("%s: never seen; last %v (archiver log %s)", what, last, s.Proc.LogPath)
		}
	}
	want("backends up and nothing held", func(g map[string]float64) bool {
		return g[`jobvault_archiver_backend_up{backend="database"}`] == 1 && g[`jobvault_archiver_backend_up{backend="store"}`] == 1 &&
			g[`jobvault_archiver_finalizers_held{kind="job"}`] == 0 && g[`jobvault_archiver_finalizers_held{kind="pod"}`] == 0
	})
	pg, minio := testbed.PostgresCluster(t), testbed.MinIOInstance(t)
	pg.Stop()
	minio.Stop()
	up := false
	t.Cleanup(func() {
		if !up {
			pg.Start(t)
			minio.Start(t)
		}
	})
	held := testbed.Job(s.NS, "held").Task("worker", 1, []string{"main"}).Obj()
	stack.PodLogs(t, s.Env, s.NS, held.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "alice", held)
	stack.WaitPhase(t, s.Env, held, batchv1alpha1.Completed, 2*time.Minute)
	want("both backends down, the job and its pod held past due", func(g map[string]float64) bool {
		return g[`jobvault_archiver_backend_up{backend="database"}`] == 0 && g[`jobvault_archiver_backend_up{backend="store"}`] == 0 &&
			g[`jobvault_archiver_finalizers_held{kind="job"}`] == 1 && g[`jobvault_archiver_finalizers_held{kind="pod"}`] == 1 &&
			g[`jobvault_archiver_finalizer_held_oldest_seconds{kind="job"}`] >= 2
	})
	pg.Start(t)
	minio.Start(t)
	up = true
	s.WaitArchived(t, held, 3*time.Minute)
	want("backends up again and nothing held", func(g map[string]float64) bool {
		return g[`jobvault_archiver_backend_up{backend="database"}`] == 1 && g[`jobvault_archiver_backend_up{backend="store"}`] == 1 &&
			g[`jobvault_archiver_finalizers_held{kind="job"}`] == 0 && g[`jobvault_archiver_finalizer_held_oldest_seconds{kind="job"}`] == 0
	})
}

// alert is one parsed alerting rule and the metric names its expression selects.
type alert struct {
	name    string
	metrics []string
}

// checkRules parses the PrometheusRule's groups with rulefmt and checks every rule.
func checkRules(t *testing.T, rule *unstructured.Unstructured) []alert {
	t.Helper()
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	raw, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(raw, false, model.LegacyValidation)
	for _, err := range errs {
		t.Errorf("rulefmt: %v", err)
	}
	if groups == nil || len(errs) > 0 {
		t.FailNow()
	}
	anchors := docAnchors(t, runbookDoc)
	var alerts []alert
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: rule %q is not an alert", g.Name, r.Record)
				continue
			}
			a := alert{name: r.Alert, metrics: exprMetrics(t, r.Alert, r.Expr)}
			alerts = append(alerts, a)
			if len(a.metrics) == 0 {
				t.Errorf("%s: its expression selects no series", r.Alert)
			}
			if !slices.Contains(severities, r.Labels["severity"]) {
				t.Errorf("%s: severity %q, want one of %q", r.Alert, r.Labels["severity"], severities)
			}
			for _, key := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[key]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, key)
				}
			}
			if _, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "/"+runbookDoc+"#"); !anchors.Has(anchor) {
				t.Errorf("%s: runbook %q is not a heading of %s", r.Alert, r.Annotations["runbook_url"], runbookDoc)
			}
			// A window-less comparison must hold a while before paging: a blip is not an incident.
			if usesRange := strings.Contains(r.Expr, "increase("); !usesRange && time.Duration(r.For) < time.Minute {
				t.Errorf("%s: for %v; an instantaneous condition must hold at least a minute", r.Alert, time.Duration(r.For))
			}
			if time.Duration(r.For) > time.Hour {
				t.Errorf("%s: for %v is too long to be of use", r.Alert, time.Duration(r.For))
			}
		}
	}
	return alerts
}

// exprMetrics parses a PromQL expression with Prometheus' parser and returns the metric names
// its selectors name.
func exprMetrics(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%s: %q selects series without naming them", where, expr)
		}
		names = append(names, name)
		return nil
	})
	return names
}

// dashboardMetrics parses every query of the dashboard and returns the metric names they select.
func dashboardMetrics(t *testing.T, cm *unstructured.Unstructured) sets.Set[string] {
	t.Helper()
	raw, _, _ := unstructured.NestedString(cm.Object, "data", "jobvault.json")
	type panel struct {
		Title   string
		Panels  []json.RawMessage
		Targets []struct{ Expr string }
	}
	var dash struct {
		Panels []json.RawMessage
	}
	if err := json.Unmarshal([]byte(raw), &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	names := sets.New[string]()
	queries := 0
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, rawPanel := range ps {
			var p panel
			if err := json.Unmarshal(rawPanel, &p); err != nil {
				t.Fatalf("dashboard panel: %v", err)
			}
			for _, tg := range p.Targets {
				queries++
				names.Insert(exprMetrics(t, "dashboard panel "+strconv.Quote(p.Title), tg.Expr)...)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if queries == 0 {
		t.Fatalf("the dashboard has no queries")
	}
	return names
}

// checkPodMonitor: the PodMonitor selects the pods of both Deployments and scrapes a port each
// of them names.
func checkPodMonitor(t *testing.T, pm *unstructured.Unstructured) {
	t.Helper()
	webhook, archiver, agent := stack.Kustomize(t, "webhook"), stack.Kustomize(t, "archiver"), stack.Kustomize(t, "agent")
	sel, _, _ := unstructured.NestedMap(pm.Object, "spec", "selector")
	selRaw, _ := json.Marshal(sel)
	var selector struct {
		MatchLabels      map[string]string
		MatchExpressions []struct {
			Key, Operator string
			Values        []string
		}
	}
	if err := json.Unmarshal(selRaw, &selector); err != nil {
		t.Fatal(err)
	}
	endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	namespaces, _, _ := unstructured.NestedStringSlice(pm.Object, "spec", "namespaceSelector", "matchNames")
	for _, d := range []*unstructured.Unstructured{find(webhook, "Deployment", "jobvault-webhook"), find(archiver, "Deployment", "jobvault-archiver"),
		find(agent, "DaemonSet", "jobvault-agent")} {
		if d == nil {
			t.Fatalf("config/webhook, config/archiver or config/agent renders no workload")
		}
		if ns := cmp.Or(d.GetNamespace(), deployNamespace); len(namespaces) > 0 && !slices.Contains(namespaces, ns) {
			t.Errorf("PodMonitor jobvault looks in namespaces %q, not in %s of %s", namespaces, ns, d.GetName())
		}
		podLabels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		selected := true
		for k, v := range selector.MatchLabels {
			selected = selected && podLabels[k] == v
		}
		for _, e := range selector.MatchExpressions {
			selected = selected && e.Operator == "In" && slices.Contains(e.Values, podLabels[e.Key])
		}
		if !selected {
			t.Errorf("PodMonitor jobvault does not select the pods of Deployment %s", d.GetName())
		}
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		for _, ep := range endpoints {
			port := ep.(map[string]any)["port"]
			named := false
			for _, c := range containers {
				ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
				for _, p := range ports {
					named = named || p.(map[string]any)["name"] == port
				}
			}
			if !named {
				t.Errorf("PodMonitor jobvault scrapes port %v, which Deployment %s does not name", port, d.GetName())
			}
		}
	}
}

// runbookDoc is the page, relative to the module root, whose headings the alerts' runbook_url
// annotations link to.
const runbookDoc = "docs/operations.md"

// docAnchors are the GitHub anchors of a Markdown page's headings.
func docAnchors(t *testing.T, page string) sets.Set[string] {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testbed.ModuleRoot(), page))
	if err != nil {
		t.Fatal(err)
	}
	anchors := sets.New[string]()
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(string(raw), -1) {
		anchors.Insert(strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-"))
	}
	return anchors
}

// parseExposition parses a /metrics page.
func parseExposition(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// exportedNames are the series names a /metrics page serves: each family's name, and for
// histograms and summaries the _bucket, _sum and _count series PromQL selects.
func exportedNames(t *testing.T, text string) sets.Set[string] {
	t.Helper()
	names := sets.New[string]()
	for name, f := range parseExposition(t, text) {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names.Insert(name+"_bucket", name+"_sum", name+"_count")
		case dto.MetricType_SUMMARY:
			names.Insert(name, name+"_sum", name+"_count")
		default:
			names.Insert(name)
		}
	}
	return names
}

// gaugeValues are the values of jobvault's gauges on a /metrics page, by series
// (name{label="value"}, one label at most).
func gaugeValues(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name, f := range parseExposition(t, text) {
		if f.GetType() != dto.MetricType_GAUGE || !strings.HasPrefix(name, "jobvault_") {
			continue
		}
		for _, m := range f.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + strconv.Quote(l.GetValue()) + "}"
			}
			out[key] = m.GetGauge().GetValue()
		}
	}
	return out
}
