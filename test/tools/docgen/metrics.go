package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/jobvault/jobvault/pkg/metrics"
)

// metric is one Prometheus series family a program defines.
type metric struct {
	Name, Type, Help string
	Labels           []string
	Where            string // the file that defines it, relative to the module root
}

// metricDirs are the directories whose collectors are documented. The archiver's own series are
// defined in pkg/metrics, which describes them itself (metrics.Definitions, with each label's
// values): they are read from there, not parsed.
var metricDirs = []string{"pkg", "archiver", "webhook"}

// definedDir is pkg/metrics, skipped by the parse.
var definedDir = filepath.Join("pkg", "metrics")

// constructors are client_golang's constructors and the type of what each makes; NewDesc's type
// comes from the const metrics made of it.
var constructors = map[string]string{
	"NewCounter": "counter", "NewCounterVec": "counter", "NewCounterFunc": "counter",
	"NewGauge": "gauge", "NewGaugeVec": "gauge", "NewGaugeFunc": "gauge",
	"NewHistogram": "histogram", "NewHistogramVec": "histogram",
	"NewSummary": "summary", "NewSummaryVec": "summary",
	"NewDesc": "",
}

// valueTypes are the prometheus.ValueType names a const metric is made with.
var valueTypes = map[string]string{"CounterValue": "counter", "GaugeValue": "gauge", "UntypedValue": "untyped"}

const promPath = "github.com/prometheus/client_golang/prometheus"

// metricsOf reads the collectors defined in the non-test Go files under metricDirs: the
// arguments of client_golang's constructors, which must be constant strings.
func metricsOf(root string) ([]metric, error) {
	var out []metric
	for _, d := range metricDirs {
		pkgs := map[string][]*ast.File{}
		names := map[*ast.File]string{}
		fset := token.NewFileSet()
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && path == filepath.Join(root, definedDir) {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			pkgs[filepath.Dir(rel)] = append(pkgs[filepath.Dir(rel)], f)
			names[f] = filepath.ToSlash(rel)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", d, err)
		}
		for _, files := range pkgs {
			ms, err := packageMetrics(files, names)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
	}
	out = append(out, definedMetrics()...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// definedMetrics are the archiver's series as pkg/metrics defines them, each label with the
// values it takes.
func definedMetrics() []metric {
	var out []metric
	for _, d := range metrics.Definitions() {
		m := metric{Name: d.Name, Type: d.Type, Help: d.Help, Where: filepath.ToSlash(filepath.Join(definedDir, "metrics.go"))}
		for _, l := range d.Labels {
			m.Labels = append(m.Labels, l.Name+" ("+strings.Join(l.Values, ", ")+")")
		}
		out = append(out, m)
	}
	return out
}

// packageMetrics finds the metrics one package's files define.
func packageMetrics(files []*ast.File, names map[*ast.File]string) ([]metric, error) {
	consts := packageConsts(files)
	var out []metric
	descs := map[string]int{} // what holds a Desc → its index in out
	var errs []string
	for _, f := range files {
		prom := importName(f, promPath)
		if prom == "" {
			continue
		}
		held := descHolders(f, prom)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			for ctor, typ := range constructors {
				if !isCall(call, prom, ctor) {
					continue
				}
				var m metric
				var err error
				if ctor == "NewDesc" {
					m, err = descMetric(call, consts)
				} else {
					m, err = optsMetric(call, typ, consts)
				}
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s: %s: %v", names[f], ctor, err))
					continue
				}
				m.Where = names[f]
				if ctor == "NewDesc" {
					descs[held[call]] = len(out)
				}
				out = append(out, m)
			}
			return true
		})
	}
	// A Desc's type is that of the const metrics made of it.
	for _, f := range files {
		prom := importName(f, promPath)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || prom == "" || len(call.Args) < 2 || !(isCall(call, prom, "MustNewConstMetric") || isCall(call, prom, "NewConstMetric")) {
				return true
			}
			i, ok := descs[lastName(call.Args[0])]
			if !ok {
				return true
			}
			if sel, ok := call.Args[1].(*ast.SelectorExpr); ok {
				out[i].Type = valueTypes[sel.Sel.Name]
			}
			return true
		})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("metrics whose names, help or labels are not constants:\n%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

// descHolders names what holds each NewDesc call's result: the variable, assigned name or
// struct field the const metrics are then made from.
func descHolders(f *ast.File, prom string) map[*ast.CallExpr]string {
	held := map[*ast.CallExpr]string{}
	hold := func(name string, v ast.Expr) {
		if call, ok := unparen(v).(*ast.CallExpr); ok && isCall(call, prom, "NewDesc") {
			held[call] = name
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, v := range n.Values {
				if i < len(n.Names) {
					hold(n.Names[i].Name, v)
				}
			}
		case *ast.AssignStmt:
			for i, v := range n.Rhs {
				if i < len(n.Lhs) {
					hold(lastName(n.Lhs[i]), v)
				}
			}
		case *ast.KeyValueExpr:
			hold(lastName(n.Key), n.Value)
		}
		return true
	})
	return held
}

// optsMetric reads a constructor call whose first argument is an Opts literal and, for a Vec,
// whose second is the label names.
func optsMetric(call *ast.CallExpr, typ string, consts map[string]string) (metric, error) {
	m := metric{Type: typ}
	if len(call.Args) == 0 {
		return m, fmt.Errorf("no options")
	}
	lit, ok := unparen(call.Args[0]).(*ast.CompositeLit)
	if !ok {
		return m, fmt.Errorf("options are not a literal")
	}
	var parts [3]string // namespace, subsystem, name
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, _ := kv.Key.(*ast.Ident)
		if key == nil {
			continue
		}
		slot := map[string]int{"Namespace": 0, "Subsystem": 1, "Name": 2}
		if i, ok := slot[key.Name]; ok || key.Name == "Help" {
			v, err := constString(kv.Value, consts)
			if err != nil {
				return m, fmt.Errorf("%s: %w", key.Name, err)
			}
			if key.Name == "Help" {
				m.Help = v
			} else {
				parts[i] = v
			}
		}
	}
	var name []string
	for _, p := range parts {
		if p != "" {
			name = append(name, p)
		}
	}
	m.Name = strings.Join(name, "_")
	if m.Name == "" {
		return m, fmt.Errorf("no name")
	}
	if len(call.Args) > 1 && strings.HasSuffix(funcName(call), "Vec") {
		labels, err := constStrings(call.Args[1], consts)
		if err != nil {
			return m, fmt.Errorf("%s: labels: %w", m.Name, err)
		}
		m.Labels = labels
	}
	return m, nil
}

// descMetric reads prometheus.NewDesc(name, help, labels, constLabels).
func descMetric(call *ast.CallExpr, consts map[string]string) (metric, error) {
	var m metric
	if len(call.Args) < 3 {
		return m, fmt.Errorf("NewDesc with %d arguments", len(call.Args))
	}
	var err error
	if m.Name, err = constString(call.Args[0], consts); err != nil {
		return m, fmt.Errorf("NewDesc name: %w", err)
	}
	if m.Help, err = constString(call.Args[1], consts); err != nil {
		return m, fmt.Errorf("NewDesc %s help: %w", m.Name, err)
	}
	if m.Labels, err = constStrings(call.Args[2], consts); err != nil {
		return m, fmt.Errorf("NewDesc %s labels: %w", m.Name, err)
	}
	return m, nil
}

// packageConsts are the package's constant strings, by name, as far as they can be evaluated
// from literals and each other.
func packageConsts(files []*ast.File) map[string]string {
	exprs := map[string]ast.Expr{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						exprs[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	consts := map[string]string{}
	for changed := true; changed; {
		changed = false
		for name, e := range exprs {
			if _, done := consts[name]; done {
				continue
			}
			if v, err := constString(e, consts); err == nil {
				consts[name] = v
				changed = true
			}
		}
	}
	return consts
}

// constString evaluates a string literal, a known constant, or a concatenation of those.
func constString(e ast.Expr, consts map[string]string) (string, error) {
	switch e := unparen(e).(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			return strconv.Unquote(e.Value)
		}
	case *ast.Ident:
		if v, ok := consts[e.Name]; ok {
			return v, nil
		}
	case *ast.SelectorExpr:
		if v, ok := external[exprString(e)]; ok {
			return v, nil
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			x, err := constString(e.X, consts)
			if err != nil {
				return "", err
			}
			y, err := constString(e.Y, consts)
			return x + y, err
		}
	}
	return "", fmt.Errorf("%s is not a constant string", exprString(e))
}

// constStrings evaluates a []string literal of constant strings; nil is none.
func constStrings(e ast.Expr, consts map[string]string) ([]string, error) {
	if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
		return nil, nil
	}
	lit, ok := unparen(e).(*ast.CompositeLit)
	if !ok {
		return nil, fmt.Errorf("%s is not a literal", exprString(e))
	}
	var out []string
	for _, el := range lit.Elts {
		v, err := constString(el, consts)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// importName is the name a file imports path under, or "".
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return filepath.Base(path)
		}
	}
	return ""
}

// isCall reports whether call is pkg.name(...).
func isCall(call *ast.CallExpr, pkg, name string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// funcName is the name of the function a call calls.
func funcName(call *ast.CallExpr) string {
	if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
		return sel.Sel.Name
	}
	return ""
}

// lastName is the identifier an expression ends with (x or a.b.x).
func lastName(e ast.Expr) string {
	switch e := unparen(e).(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

func unparen(e ast.Expr) ast.Expr {
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = u.X
	}
	return ast.Unparen(e)
}

// exprString is an expression as written, for messages and the external table.
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return fmt.Sprintf("%T", e)
}

// metricPrograms name the programs by their metric prefix, in the page's order.
var metricPrograms = []struct{ prefix, title, text string }{
	{"jobvault_archiver_", "archiver", "On the archiver's `--metrics-bind-address`, beside controller-runtime's own series (work queues, reconciles, client requests) and the Go and process collectors."},
	{"jobvault_agent_", "archiver agent", "On the node agent's `--metrics-bind-address`, beside the Go and process collectors."},
	{"jobvault_webhook_", "webhook", "On the webhook's `--metrics-bind-address`, beside controller-runtime's `controller_runtime_webhook_requests_total{webhook,code}` and `controller_runtime_webhook_latency_seconds{webhook}`."},
}

// renderMetrics is metrics.md: each program's series.
func renderMetrics(ms []metric) []byte {
	var b strings.Builder
	b.WriteString(generatedNote("the Prometheus collectors under pkg/, archiver/ and webhook/"))
	b.WriteString("# Metrics\n\nEvery series jobvault defines, named `jobvault_<program>_<noun>_<verb or unit>` and labelled\n" +
		"only by bounded values. The event counters start every series at zero, so `increase()` sees\n" +
		"the first event. The alerts on them: [operations.md](../operations.md#monitoring).\n")
	for _, p := range metricPrograms {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n| series | type | labels | help |\n|---|---|---|---|\n", p.title, p.text)
		for _, m := range ms {
			if !strings.HasPrefix(m.Name, p.prefix) {
				continue
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, cell(strings.Join(m.Labels, ", ")), cell(m.Help))
		}
	}
	var other []string
	for _, m := range ms {
		known := false
		for _, p := range metricPrograms {
			known = known || strings.HasPrefix(m.Name, p.prefix)
		}
		if !known {
			other = append(other, fmt.Sprintf("| `%s` | %s | %s | %s (`%s`) |", m.Name, m.Type, cell(strings.Join(m.Labels, ", ")), cell(m.Help), m.Where))
		}
	}
	if len(other) > 0 {
		b.WriteString("\n## other\n\nSeries outside the programs' prefixes.\n\n| series | type | labels | help |\n|---|---|---|---|\n" + strings.Join(other, "\n") + "\n")
	}
	return []byte(b.String())
}
