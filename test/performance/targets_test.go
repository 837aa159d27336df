package performance

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// targetsFile holds every benchmark target once, with where its number came from.
const targetsFile = "targets.yaml"

// target is one entry of targetsFile: a bound (Max or Min) on one figure of a benchmark.
type target struct {
	Max       bound  `json:"max"`
	Min       bound  `json:"min"`
	Benchmark string `json:"benchmark"`
	Figure    string `json:"figure"`
	Source    string `json:"source"`
}

// bound is a target's bound as written: a YAML number (1.10) is kept as its text, as a duration
// or quantity (5s, 300Mi) is.
type bound string

// UnmarshalJSON takes a string or a number.
func (b *bound) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*b = bound(s)
		return nil
	}
	*b = bound(data)
	return nil
}

// bound is the target's bound, whichever side it is on.
func (t target) bound() string {
	if t.Max != "" {
		return string(t.Max)
	}
	return string(t.Min)
}

// targets are targetsFile's entries by name, read when the package starts: a benchmark run with
// a missing or malformed target fails at once, not after minutes of load.
var targets = func() map[string]target {
	raw, err := os.ReadFile(targetsFile)
	if err != nil {
		panic(fmt.Errorf("read benchmark targets: %w", err))
	}
	ts := map[string]target{}
	if err := yaml.UnmarshalStrict(raw, &ts); err != nil {
		panic(fmt.Errorf("parse %s: %w", targetsFile, err))
	}
	return ts
}()

// targetBound is the bound of the named target; a name the file lacks is a programming error.
func targetBound(name string) string {
	t, ok := targets[name]
	if !ok || t.bound() == "" {
		panic(fmt.Sprintf("%s has no target %q", targetsFile, name))
	}
	return t.bound()
}

// targetDuration is the named target as a duration ("5s").
func targetDuration(name string) time.Duration {
	d, err := time.ParseDuration(targetBound(name))
	if err != nil {
		panic(fmt.Errorf("target %s: %w", name, err))
	}
	return d
}

// targetNumber is the named target as a number ("0.8").
func targetNumber(name string) float64 {
	f, err := strconv.ParseFloat(targetBound(name), 64)
	if err != nil {
		panic(fmt.Errorf("target %s: %w", name, err))
	}
	return f
}

// targetBytes is the named target as bytes, a Kubernetes quantity ("300Mi").
func targetBytes(name string) int64 {
	q, err := resource.ParseQuantity(targetBound(name))
	if err != nil {
		panic(fmt.Errorf("target %s: %w", name, err))
	}
	return q.Value()
}

// TestTargets: every target has one bound that parses, the benchmark that prints it, what it
// bounds and where its number came from.
func TestTargets(t *testing.T) {
	if len(targets) == 0 {
		t.Fatalf("%s holds no target", targetsFile)
	}
	for name, tg := range targets {
		if (tg.Max == "") == (tg.Min == "") {
			t.Errorf("target %s: max %q, min %q; want exactly one", name, tg.Max, tg.Min)
		}
		if tg.Benchmark == "" || tg.Figure == "" || tg.Source == "" {
			t.Errorf("target %s: benchmark %q, figure %q, source %q; want all three", name, tg.Benchmark, tg.Figure, tg.Source)
		}
		b := tg.bound()
		_, errD := time.ParseDuration(b)
		_, errN := strconv.ParseFloat(b, 64)
		_, errQ := resource.ParseQuantity(b)
		if errD != nil && errN != nil && errQ != nil {
			t.Errorf("target %s: bound %q is neither a duration, a number nor a quantity", name, b)
		}
	}
}
