package admission

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/tracking"
)

func TestPodMutator(t *testing.T) {
	tracked := func() *objBuilder {
		return pod().label(tracking.TrackedLabel, tracking.TrackedValue).label("volcano.sh/job-name", "train")
	}
	cases := []struct {
		name        string
		in          *objBuilder
		want        *objBuilder
		wantPatched bool
	}{{
		name:        "tracked pod gets the finalizer",
		in:          tracked(),
		want:        tracked().finalizer(tracking.PodFinalizer),
		wantPatched: true,
	}, {
		name:        "keeps other finalizers first",
		in:          tracked().finalizer("example.com/keep"),
		want:        tracked().finalizer("example.com/keep").finalizer(tracking.PodFinalizer),
		wantPatched: true,
	}, {
		name: "already has the finalizer",
		in:   tracked().finalizer(tracking.PodFinalizer),
		want: tracked().finalizer(tracking.PodFinalizer),
	}, {
		name: "pod without labels passes unchanged",
		in:   pod(),
		want: pod(),
	}, {
		name: "untracked pod passes unchanged",
		in:   pod().label("app", "web"),
		want: pod().label("app", "web"),
	}, {
		name: "tracking label with another value passes unchanged",
		in:   pod().label(tracking.TrackedLabel, "false"),
		want: pod().label(tracking.TrackedLabel, "false"),
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
