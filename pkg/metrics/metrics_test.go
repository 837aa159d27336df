package metrics

import (
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// stateCollector stands for the archiver's scrape-time collectors: it describes the state gauges.
type stateCollector struct{}

func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- FinalizersHeld
	ch <- FinalizerHeldOldestSeconds
	ch <- BackendUp
}
func (stateCollector) Collect(chan<- prometheus.Metric) {}

// TestRegistryMatchesDefinitions: what Register puts on a registry is exactly what the reference
// lists, so that the reference cannot miss a series.
func TestRegistryMatchesDefinitions(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg, stateCollector{}); err != nil {
		t.Fatal(err)
	}
	var registered []string
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range append(slices.Clone(collectors), stateCollector{}) {
		ch := make(chan *prometheus.Desc, 10)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			registered = append(registered, fqName.FindStringSubmatch(d.String())[1])
		}
	}
	slices.Sort(registered)
	var defined []string
	for _, d := range Definitions() {
		defined = append(defined, d.Name)
	}
	if diff := cmp.Diff(defined, registered); diff != "" {
		t.Errorf("registered series differ from the definitions (-defined +registered):\n%s", diff)
	}
	if err := Register(prometheus.NewRegistry()); err != nil {
		t.Errorf("Register on a second registry: %v", err)
	}
	if err := Register(reg); err == nil {
		t.Error("Register twice on one registry succeeded, want the duplicate refused")
	}
}

// TestCountersStartAtZero: each series of the event counters that alerts watch exists before its
// first event, so that increase() sees the first one.
func TestCountersStartAtZero(t *testing.T) {
	if err := Register(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    prometheus.Collector
		want int
	}{{"archive failures", ArchiveFailuresTotal, 3}, {"incomplete releases", ReleasesIncompleteTotal, 8}, {"log gaps", LogGapsTotal, 7},
		{"follow reopens", FollowReopensTotal, 5}, {"runs claimed", RunsClaimedTotal, 2}, {"runs taken over", RunsTakenOverTotal, 3}} {
		if n := testutil.CollectAndCount(tc.c); n < tc.want {
			t.Errorf("%s: %d series before the first event, want %d", tc.name, n, tc.want)
		}
	}
}
