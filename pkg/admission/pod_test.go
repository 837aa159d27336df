package admission

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/tracking"
)

func TestPodMutator(t *testing.T) {
	cases := []struct {
		name        string
		in          *objBuilder
		want        *objBuilder
		wantPatched bool
	}{{
		name:        "a VcJob's pod gets the finalizer",
		in:          vcjobPod(),
		want:        vcjobPod().finalizer(tracking.PodFinalizer),
		wantPatched: true,
	}, {
		name:        "keeps other finalizers first",
		in:          vcjobPod().finalizer("example.com/keep"),
		want:        vcjobPod().finalizer("example.com/keep").finalizer(tracking.PodFinalizer),
		wantPatched: true,
	}, {
		name:        "another version of the VcJob API",
		in:          pod().label(tracking.JobPodLabel, "train").owner("batch.volcano.sh/v1beta1", "Job", true),
		want:        pod().label(tracking.JobPodLabel, "train").owner("batch.volcano.sh/v1beta1", "Job", true).finalizer(tracking.PodFinalizer),
		wantPatched: true,
	}, {
		name: "already has the finalizer",
		in:   vcjobPod().finalizer(tracking.PodFinalizer),
		want: vcjobPod().finalizer(tracking.PodFinalizer),
	}, {
		name: "pod without labels passes unchanged",
		in:   pod(),
		want: pod(),
	}, {
		name: "untracked pod passes unchanged",
		in:   pod().label("app", "web"),
		want: pod().label("app", "web"),
	}, {
		name: "Volcano's label copied onto a pod no VcJob owns passes unchanged",
		in:   pod().label(tracking.JobPodLabel, "train"),
		want: pod().label(tracking.JobPodLabel, "train"),
	}, {
		name: "a VcJob owning the pod without controlling it is not enough",
		in:   pod().label(tracking.JobPodLabel, "train").owner("batch.volcano.sh/v1alpha1", "Job", false),
		want: pod().label(tracking.JobPodLabel, "train").owner("batch.volcano.sh/v1alpha1", "Job", false),
	}, {
		name: "a batch/v1 Job's pod passes unchanged",
		in:   pod().label(tracking.JobPodLabel, "train").owner("batch/v1", "Job", true),
		want: pod().label(tracking.JobPodLabel, "train").owner("batch/v1", "Job", true),
	}, {
		name: "a VcJob's controlled pod without Volcano's label passes unchanged",
		in:   pod().owner("batch.volcano.sh/v1alpha1", "Job", true),
		want: pod().owner("batch.volcano.sh/v1alpha1", "Job", true),
	}, {
		name: "our tracking label alone does not make a pod tracked",
		in:   pod().label(tracking.TrackedLabel, tracking.TrackedValue),
		want: pod().label(tracking.TrackedLabel, tracking.TrackedValue),
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.in.raw(t)
			resp := NewPodMutator().Handle(t.Context(), podRequest(raw))
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			if got := len(resp.Patches) > 0; got != tc.wantPatched {
				t.Errorf("patched = %v (%v), want %v", got, resp.Patches, tc.wantPatched)
			}
			for _, op := range resp.Patches {
				if op.Operation != "add" || !strings.HasPrefix(op.Path, "/metadata/") {
					t.Errorf("patch operation %s %s, want only add under /metadata", op.Operation, op.Path)
				}
			}
			if diff := cmp.Diff(tc.want.build(t), decodeMap(t, applyPatch(t, raw, resp))); diff != "" {
				t.Errorf("mutated pod (-want +got):\n%s", diff)
			}
		})
	}
}
