package archiver

import (
	"strings"
	"testing"
	"time"
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
