package admission

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/jobvault/jobvault/pkg/tracking"
)

var admissionTime = time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

const admittedAtStamp = "2026-03-14T15:09:26Z"

func newJobMutator(t testing.TB, now time.Time) *JobMutator {
	t.Helper()
	m, err := NewJobMutator(clocktesting.NewFakePassiveClock(now))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// stamped adds everything the mutator adds for alice of team-a to b, for want-objects: the job's
// metadata only, never its pod templates.
func stamped(b *objBuilder, groupsJSON string) *objBuilder {
	return b.finalizer(tracking.JobFinalizer).
		label(tracking.TrackedLabel, tracking.TrackedValue).
		annotation(tracking.SubmitterAnnotation, "alice").
		annotation(tracking.SubmitterGroupsAnnotation, groupsJSON).
		annotation(tracking.AdmittedAtAnnotation, admittedAtStamp)
}

func TestNewJobMutatorRejectsNilClock(t *testing.T) {
	if _, err := NewJobMutator(nil); err == nil || !strings.Contains(err.Error(), "clk") {
		t.Fatalf("NewJobMutator(nil) error = %v, want one naming clk", err)
	}
}

func TestJobMutator(t *testing.T) {
	const groups = `["team-a","system:authenticated"]`
	base := func() *objBuilder {
		return vcjob().task("worker", nil).task("ps", map[string]string{"role": "ps"})
	}
	cases := []struct {
		name   string
		in     *objBuilder
		groups []string
		want   *objBuilder
	}{{
		name:   "named job",
		in:     base(),
		groups: []string{"team-a", "system:authenticated"},
		want:   stamped(base(), groups),
	}, {
		// No name and no UID at admission: nothing may be derived from them.
		name:   "generateName job",
		in:     base().generateName("train-"),
		groups: []string{"team-a", "system:authenticated"},
		want:   stamped(base().generateName("train-"), groups),
	}, {
		name: "keeps existing labels, annotations and finalizers",
		in: base().label("team", "a").annotation("note", "keep me").finalizer("example.com/keep").
			set([]any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "123"}}, "metadata", "ownerReferences"),
		groups: []string{"team-a", "system:authenticated"},
		want: stamped(base().label("team", "a").annotation("note", "keep me").finalizer("example.com/keep").
			set([]any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "123"}}, "metadata", "ownerReferences"), groups).
			annotation(tracking.SubmittedForAnnotation, "v1 ConfigMap owner 123"),
	}, {
		name:   "already stamped by an earlier pass of the same request",
		in:     stamped(base(), groups).annotation(tracking.AdmittedAtAnnotation, "2026-03-14T15:09:20Z"),
		groups: []string{"team-a", "system:authenticated"},
		want:   stamped(base(), groups).annotation(tracking.AdmittedAtAnnotation, "2026-03-14T15:09:20Z"),
	}, {
		name: "replaces a forged submitter, groups and admission time",
		in: base().annotation(tracking.SubmitterAnnotation, "mallory").
			annotation(tracking.SubmitterGroupsAnnotation, `["system:masters"]`).
			annotation(tracking.AdmittedAtAnnotation, "2001-01-01T00:00:00Z"),
		groups: []string{"team-a", "system:authenticated"},
		want:   stamped(base(), groups),
	}, {
		name:   "replaces an admission time in the future",
		in:     base().annotation(tracking.AdmittedAtAnnotation, "2026-03-14T16:09:26Z"),
		groups: []string{"team-a", "system:authenticated"},
		want:   stamped(base(), groups),
	}, {
		name:   "replaces a non-UTC admission time",
		in:     base().annotation(tracking.AdmittedAtAnnotation, "2026-03-14T16:09:20+01:00"),
		groups: []string{"team-a", "system:authenticated"},
		want:   stamped(base(), groups),
	}, {
		name:   "sets the tracking label a user set otherwise",
		in:     base().label(tracking.TrackedLabel, "false"),
		groups: []string{"team-a", "system:authenticated"},
		want:   stamped(base(), groups),
	}, {
		name:   "no groups is an empty array",
		in:     base(),
		groups: nil,
		want:   stamped(base(), `[]`),
	}, {
		name:   "task without template",
		in:     vcjob().set([]any{map[string]any{"name": "empty", "replicas": 1}}, "spec", "tasks"),
		groups: []string{"team-a", "system:authenticated"},
		want:   stamped(vcjob().set([]any{map[string]any{"name": "empty", "replicas": 1}}, "spec", "tasks"), groups),
	}, {
		name:   "job without tasks",
		in:     vcjob(),
		groups: []string{"team-a", "system:authenticated"},
		want:   stamped(vcjob(), groups),
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newJobMutator(t, admissionTime)
			raw := tc.in.raw(t)
			resp := m.Handle(t.Context(), jobRequest(raw, "alice", tc.groups...))
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			got := decodeMap(t, applyPatch(t, raw, resp))
			if diff := cmp.Diff(tc.want.build(t), got); diff != "" {
				t.Errorf("mutated VcJob (-want +got):\n%s", diff)
			}
		})
	}
}

// The API server reinvokes us when a later webhook (Volcano's) changed the job. The second pass,
// seconds later and with the same userInfo, must change nothing, whatever Volcano added.
func TestJobMutatorReinvocationIsNoOp(t *testing.T) {
	in := vcjob().generateName("train-").label("team", "a").finalizer("example.com/keep").
		task("worker", nil).task("ps", map[string]string{"role": "ps"})
	raw := in.raw(t)
	first := newJobMutator(t, admissionTime).Handle(t.Context(), jobRequest(raw, "alice", "team-a"))
	if !first.Allowed || len(first.Patches) == 0 {
		t.Fatalf("first pass: allowed=%v patches=%v result=%v", first.Allowed, first.Patches, first.Result)
	}
	mutated := applyPatch(t, raw, first)

	// What Volcano's mutating webhook does: default fields and add its own metadata.
	volcano := &objBuilder{obj: decodeMap(t, mutated)}
	volcano.set(float64(3), "spec", "maxRetry").label("volcano.sh/queue-name", "default")
	for _, task := range volcano.obj["spec"].(map[string]any)["tasks"].([]any) {
		task.(map[string]any)["minAvailable"] = float64(2)
	}
	reinvoked := volcano.raw(t)

	for _, later := range []time.Duration{0, 4 * time.Second} {
		second := newJobMutator(t, admissionTime.Add(later)).Handle(t.Context(), jobRequest(reinvoked, "alice", "team-a"))
		if !second.Allowed {
			t.Fatalf("second pass after %v denied: %v", later, second.Result)
		}
		if len(second.Patches) != 0 {
			t.Errorf("second pass after %v patched %v, want no change", later, second.Patches)
		}
	}
}

var allowedJobPatchPath = regexp.MustCompile(`^/metadata/`)

// A VcJob with fields newer than our volcano.sh/apis, unusual numbers and quantities must come
// back with nothing but added metadata: a typed round trip would drop or renormalise them. Its
// spec, pod templates included, is left exactly as it was.
func TestJobMutatorKeepsUnknownFields(t *testing.T) {
	raw := []byte(`{
	  "apiVersion": "batch.volcano.sh/v1alpha1",
	  "kind": "Job",
	  "metadata": {"generateName": "future-", "namespace": "ml", "labels": {"team": "a"}},
	  "spec": {
	    "someFutureField": {"nested": [1, 2.50, 1e3], "flag": true, "big": 9007199254740993},
	    "minAvailable": 1.0,
	    "queue": "default",
	    "tasks": [{
	      "name": "worker",
	      "replicas": 2,
	      "futureTaskField": {"partitionPolicy": {"totalPartitions": 4}},
	      "template": {
	        "metadata": {"labels": {"role": "worker"}, "futureMetaField": "x"},
	        "spec": {"containers": [{"name": "main", "image": "busybox",
	          "resources": {"limits": {"cpu": "1.50", "memory": "1e3Mi", "nvidia.com/gpu": 1}}}],
	          "futurePodField": null}
	      }
	    }, {
	      "name": "ps",
	      "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
	    }]
	  },
	  "futureTopLevel": {"a": []}
	}`)
	resp := newJobMutator(t, admissionTime).Handle(t.Context(), jobRequest(raw, "alice", "team-a"))
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("allowed=%v patches=%v result=%v", resp.Allowed, resp.Patches, resp.Result)
	}
	for _, op := range resp.Patches {
		if op.Operation != "add" || !allowedJobPatchPath.MatchString(op.Path) {
			t.Errorf("patch operation %s %s, want only add under /metadata", op.Operation, op.Path)
		}
	}
	patched := applyPatch(t, raw, resp)
	for _, literal := range []string{"9007199254740993", `"1.50"`, `"1e3Mi"`, "2.50", "1e3", `"futurePodField":null`} {
		if !strings.Contains(string(patched), literal) {
			t.Errorf("patched object lost %s:\n%s", literal, patched)
		}
	}
	if diff := cmp.Diff(withoutMetadata(decodeMap(t, raw)), withoutMetadata(decodeMap(t, patched))); diff != "" {
		t.Errorf("fields outside metadata changed (-want +got):\n%s", diff)
	}
}

// withoutMetadata drops metadata, the only part a mutator may touch.
func withoutMetadata(obj map[string]any) map[string]any {
	delete(obj, "metadata")
	return obj
}

// The chain of custody of a VcJob created by a controller: the username names only its service
// account; the credential and the pod that made the request come from userInfo's extra, and the
// owner that asked (a JobFlow here) from the job's ownerReferences at admission. A claim in the
// manifest is replaced by the request's facts, or emptied when the request has none.
func TestJobMutatorChainOfCustody(t *testing.T) {
	const (
		controller = "system:serviceaccount:volcano-system:jobflow-controller"
		groups     = `["system:serviceaccounts","system:serviceaccounts:volcano-system","system:authenticated"]`
		owners     = "flow.volcano.sh/v1alpha1 JobFlow train 0b6c5c1e-1 controller\nv1 ConfigMap train 0b6c5c1e-1"
	)
	extra := map[string]authenticationv1.ExtraValue{
		"authentication.kubernetes.io/credential-id": {"JTI=7a2b"},
		"authentication.kubernetes.io/pod-name":      {"jobflow-controller-5d9c"},
		"authentication.kubernetes.io/pod-uid":       {"4f1e-pod"},
		"scopes.example/unrelated":                   {"not copied"},
	}
	custody := func(b *objBuilder) *objBuilder {
		return b.finalizer(tracking.JobFinalizer).label(tracking.TrackedLabel, tracking.TrackedValue).
			annotation(tracking.SubmitterAnnotation, controller).
			annotation(tracking.SubmitterGroupsAnnotation, groups).
			annotation(tracking.AdmittedAtAnnotation, admittedAtStamp)
	}
	owned := func() *objBuilder {
		return vcjob().task("worker", nil).owner("flow.volcano.sh/v1alpha1", "JobFlow", true).owner("v1", "ConfigMap", false)
	}
	cases := []struct {
		name  string
		in    *objBuilder
		extra map[string]authenticationv1.ExtraValue
		want  *objBuilder
	}{{
		name:  "created by a controller for its owner",
		in:    owned(),
		extra: extra,
		want: custody(owned()).annotation(tracking.SubmittedForAnnotation, owners).
			annotation("jobvault.io/submitter-credential-id", "JTI=7a2b").
			annotation("jobvault.io/submitter-pod-name", "jobflow-controller-5d9c").
			annotation("jobvault.io/submitter-pod-uid", "4f1e-pod"),
	}, {
		name: "claims replaced by the request's facts",
		in: owned().annotation(tracking.SubmittedForAnnotation, "v1 ConfigMap forged x controller").
			annotation("jobvault.io/submitter-credential-id", "JTI=forged"),
		extra: extra,
		want: custody(owned()).annotation(tracking.SubmittedForAnnotation, owners).
			annotation("jobvault.io/submitter-credential-id", "JTI=7a2b").
			annotation("jobvault.io/submitter-pod-name", "jobflow-controller-5d9c").
			annotation("jobvault.io/submitter-pod-uid", "4f1e-pod"),
	}, {
		name: "claims emptied when the request has no such fact",
		in: vcjob().task("worker", nil).annotation(tracking.SubmittedForAnnotation, "v1 ConfigMap forged x controller").
			annotation("jobvault.io/submitter-pod-name", "someone-else"),
		want: custody(vcjob().task("worker", nil)).annotation(tracking.SubmittedForAnnotation, "").
			annotation("jobvault.io/submitter-pod-name", ""),
	}, {
		name: "a user without extras or owners gets no custody annotations",
		in:   vcjob().task("worker", nil),
		want: custody(vcjob().task("worker", nil)),
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.in.raw(t)
			req := jobRequest(raw, controller, "system:serviceaccounts", "system:serviceaccounts:volcano-system", "system:authenticated")
			req.UserInfo.Extra = tc.extra
			m := newJobMutator(t, admissionTime)
			resp := m.Handle(t.Context(), req)
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			mutated := applyPatch(t, raw, resp)
			if diff := cmp.Diff(tc.want.build(t), decodeMap(t, mutated)); diff != "" {
				t.Errorf("mutated VcJob (-want +got):\n%s", diff)
			}
			req.Object.Raw = mutated
			if again := m.Handle(t.Context(), req); len(again.Patches) != 0 {
				t.Errorf("second pass patched %v, want no change", again.Patches)
			}
		})
	}
}
