package metrics

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Definitions returns the definition of every series the archiver exports, by name.
func Definitions() []Definition {
	out := slices.Clone(definitions)
	slices.SortFunc(out, func(a, b Definition) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// WriteReference writes docs/reference/metrics.md: a table of every series, from Definitions.
func WriteReference(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`# Metrics reference

<!-- Generated from pkg/metrics by ` + "`go test ./pkg/metrics -run TestReference -update`" + `; do not edit. -->

The archiver serves these series on ` + "`--metrics-bind-address`" + ` (` + "`/metrics`" + `), beside
controller-runtime's own (workqueue depth, work duration and retries per controller, REST client
requests, leader election) and the Go runtime's. Every label takes only the values listed.

| Name | Type | Labels | Help |
|---|---|---|---|
`)
	for _, d := range Definitions() {
		labels := make([]string, len(d.Labels))
		for i, l := range d.Labels {
			labels[i] = fmt.Sprintf("`%s`: %s", l.Name, strings.Join(quoted(l.Values), ", "))
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.Name, d.Type, strings.Join(labels, "; "), strings.ReplaceAll(d.Help, "|", `\|`))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func quoted(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = "`" + v + "`"
	}
	return out
}
