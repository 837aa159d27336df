package archiver

import (
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/tracking"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestRetainUntil(t *testing.T) {
	at := time.Date(2026, 11, 22, 20, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		retention time.Duration
		want      time.Time
	}{
		{0, time.Time{}},
		{time.Hour, time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)},
		{7 * 24 * time.Hour, time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC)},
	} {
		o := DefaultOptions()
		o.Retention = tc.retention
		if got := o.retainUntil(at); !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("retainUntil(%s) with retention %s = %s, want %s (UTC)", at, tc.retention, got, tc.want)
		}
	}
}

func TestValidateRejectsNegativeRetention(t *testing.T) {
	o := DefaultOptions()
	o.Retention = -time.Second
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "retention must not be negative") {
		t.Errorf("Validate with retention -1s = %v, want an error naming the retention", err)
	}
}

// TestRetainUntilIn: a namespace's valid jobvault.io/retention replaces --retention; an invalid
// one, none, or an unreadable namespace leave --retention.
func TestRetainUntilIn(t *testing.T) {
	ns := func(name, retention string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if retention != "" {
			n.Annotations = map[string]string{tracking.RetentionAnnotation: retention}
		}
		return n
	}
	c := fake.NewClientBuilder().WithObjects(ns("long", "2160h"), ns("bad", "90 days"), ns("negative", "-1h"), ns("plain", "")).Build()
	at := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	o := DefaultOptions()
	o.Retention = 720 * time.Hour
	for ns, want := range map[string]time.Duration{"long": 2160 * time.Hour, "bad": 720 * time.Hour, "negative": 720 * time.Hour, "plain": 720 * time.Hour, "absent": 720 * time.Hour} {
		if got := o.retainUntilIn(t.Context(), c, ns, at); !got.Equal(at.Add(want)) {
			t.Errorf("namespace %s: retain until %s, want %s", ns, got, at.Add(want))
		}
	}
}
