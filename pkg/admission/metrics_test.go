package admission

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func counterValue(t *testing.T, kind, result string) float64 {
	t.Helper()
	var m dto.Metric
	if err := admissionsTotal.WithLabelValues(kind, result).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func histogramCount(t *testing.T, kind string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := admissionDurationSeconds.WithLabelValues(kind).(interface{ Write(*dto.Metric) error }).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func TestMetricsCountResults(t *testing.T) {
	jobs := newJobMutator(t, admissionTime)
	pods := NewPodMutator()
	job := vcjob().task("worker", nil)
	cases := []struct {
		name   string
		kind   string
		result string
		handle func()
	}{
		{"mutated VcJob", "VcJob", resultMutated, func() { jobs.Handle(t.Context(), jobRequest(job.raw(t), "alice")) }},
		{"unchanged VcJob", "VcJob", resultUnchanged, func() {
			jobs.Handle(t.Context(), jobRequest(stamped(job.clone(t), "[]").raw(t), "alice"))
		}},
		{"denied VcJob", "VcJob", resultDenied, func() { jobs.Handle(t.Context(), jobRequest([]byte("{"), "alice")) }},
		{"mutated pod", "Pod", resultMutated, func() {
			pods.Handle(t.Context(), podRequest(vcjobPod().raw(t)))
		}},
		{"unchanged pod", "Pod", resultUnchanged, func() { pods.Handle(t.Context(), podRequest(pod().raw(t))) }},
		{"denied pod", "Pod", resultDenied, func() { pods.Handle(t.Context(), podRequest(nil)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, observed := counterValue(t, tc.kind, tc.result), histogramCount(t, tc.kind)
			tc.handle()
			if got := counterValue(t, tc.kind, tc.result) - before; got != 1 {
				t.Errorf("admissions{kind=%s,result=%s} grew by %v, want 1", tc.kind, tc.result, got)
			}
			if got := histogramCount(t, tc.kind) - observed; got != 1 {
				t.Errorf("duration{kind=%s} observed %d times, want 1", tc.kind, got)
			}
		})
	}
}
