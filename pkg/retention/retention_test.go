package retention

import (
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/tracking"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestUntil(t *testing.T) {
	at := time.Date(2026, 11, 22, 20, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		retention time.Duration
		want      time.Time
	}{
		{0, time.Time{}},
		{time.Hour, time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)},
		{7 * 24 * time.Hour, time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC)},
	} {
		if got := Until(tc.retention, at); !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("Until(%s, %s) = %s, want %s (UTC)", tc.retention, at, got, tc.want)
		}
	}
}

// TestUntilIn: a namespace's valid jobvault.io/retention replaces --retention; an invalid
// one, none, or an unreadable namespace leave --retention.
func TestUntilIn(t *testing.T) {
	ns := func(name, retention string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if retention != "" {
			n.Annotations = map[string]string{tracking.RetentionAnnotation: retention}
		}
		return n
	}
	c := fake.NewClientBuilder().WithObjects(ns("long", "2160h"), ns("bad", "90 days"), ns("negative", "-1h"), ns("plain", "")).Build()
	at := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	const retention = 720 * time.Hour
	for ns, want := range map[string]time.Duration{"long": 2160 * time.Hour, "bad": 720 * time.Hour, "negative": 720 * time.Hour, "plain": 720 * time.Hour, "absent": 720 * time.Hour} {
		if got := UntilIn(t.Context(), c, ns, retention, at); !got.Equal(at.Add(want)) {
			t.Errorf("namespace %s: retain until %s, want %s", ns, got, at.Add(want))
		}
	}
}
