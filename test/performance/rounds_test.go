package performance

import (
	"testing"
	"time"
)

// TestRoundRatios checks that one stalled round moves the spread, not the median ratio, and that
// the rounds follow the order of the creates.
func TestRoundRatios(t *testing.T) {
	ours, floor := make([]time.Duration, 500), make([]time.Duration, 500)
	for i := range ours {
		ours[i], floor[i] = 11*time.Millisecond, 10*time.Millisecond
	}
	ours[150], ours[151] = time.Second, time.Second // a stall of the machine in the second round
	r := roundRatios(ours, floor, 5)
	if len(r.ratios) != 5 || r.median != 1.1 || r.min != 1.1 || r.max != 100 || r.ratios[1] != 100 {
		t.Errorf("roundRatios = %+v, want 5 rounds of 1.1 but the second (100), median 1.1, spread 1.1–100", r)
	}
	if r := roundRatios(ours[:3], floor[:3], 5); len(r.ratios) != 3 {
		t.Errorf("roundRatios of 3 creates in 5 rounds: %d rounds, want 3 (one create each)", len(r.ratios))
	}
}
