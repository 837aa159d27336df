package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/jobvault/jobvault/pkg/apiserver"
	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
)

// TestReportThroughTheAPI: a report of verify.Job with every kind of content, turned into the
// API's object by the server, sent as JSON and turned back by the plugin, prints the very text
// archiver logs verify prints.
func TestReportThroughTheAPI(t *testing.T) {
	after, before := time.Date(2026, 11, 25, 7, 0, 0, 0, time.UTC), time.Date(2026, 11, 25, 7, 5, 0, 0, time.UTC)
	rep := verify.JobReport{
		Job:          archive.JobRef{Namespace: "team", Name: "train", UID: "u-1"},
		ArchiveState: record.ArchiveReleased, Location: "s3://b/team/train/u-1/", Logs: 3, Stored: 2, Unavailable: 1,
		Result: verify.Result{Findings: []verify.Finding{
			{Kind: verify.Mismatch, Item: "log of container main (current) of pod p (uid pu)", Key: "k/main.log.gz", Detail: "sha256 abc, recorded def"},
			{Kind: verify.Missing, Item: "manifest.json", Detail: "not found"},
		}},
		Unreferenced: []string{"k/stray"},
		Gaps:         []archive.GapEntry{{PodUID: "pu", Container: "main", Run: 1, After: &after, Before: &before, Reason: "node-lost", Detail: "node n1"}},
	}
	var want bytes.Buffer
	if err := rep.WriteText(&want); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(apiserver.VerificationOf(rep))
	if err != nil {
		t.Fatal(err)
	}
	var v v1alpha1.ArchivedJobVerification
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := ReportOf(&v).WriteText(&got); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("through the API the report prints\n%s\nwant\n%s", got.String(), want.String())
	}
}

// TestDescribeShowsGapsAndRefusals: describe prints each run's state, an unavailable run's reason,
// a gap with its bounds and reason, the findings, and a refused verification as kubectl says it.
func TestDescribeShowsGapsAndRefusals(t *testing.T) {
	now := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	at := func(m int) *metav1.Time { tm := metav1.NewTime(now.Add(time.Duration(-m) * time.Minute)); return &tm }
	job := &v1alpha1.ArchivedJob{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team", UID: "u-1", CreationTimestamp: *at(60)},
		Spec:       v1alpha1.ArchivedJobSpec{Submitter: "alice", SubmitterGroups: []string{"ml"}, Queue: "default"},
		Status: v1alpha1.ArchivedJobStatus{Phase: "Failed", FinishedAt: at(10), ArchiveState: "released",
			ArchiveLocation: "s3://b/team/train/u-1/", ReleaseReason: "a log is incomplete",
			Transitions: []v1alpha1.PhaseTransition{{Phase: "Pending", Time: *at(60)}, {Phase: "Running", Time: *at(58)}, {Phase: "Failed", Time: *at(10), Reason: "PodFailed", Message: "task\nfailed"}},
			Pods: []v1alpha1.ArchivedPod{{Name: "train-w-0", UID: "pu", Task: "w", Node: "n1", Phase: "Failed", CreatedAt: *at(60),
				Containers: []v1alpha1.ArchivedContainer{{Name: "main", Type: "regular",
					Instances: []v1alpha1.LogInstance{{Name: "previous-1", State: "unavailable", Reason: "the node lost it"}, {Name: "current", State: "stored", Bytes: 42, SHA256: "abcdef"}},
					Gaps:      []v1alpha1.LogGap{{Run: 1, After: at(20), Reason: "node-lost", Detail: "node n1"}}}}}}},
	}
	var out bytes.Buffer
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupName, Resource: "archivedjobs/verify"}, "train", errors.New("needs get on pods/log"))
	if err := writeDescription(&out, job, verify.JobReport{}, forbidden, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Submitter:", "alice (groups: ml)", "Release Reason:", "a log is incomplete", "s3://b/team/train/u-1/",
		"Running", "48m0s", "task failed", "main (regular):", "previous-1", "unavailable", "the node lost it",
		"current", "42 bytes", "sha256 abcdef", "gap", "run 1", "to the run's end", "node-lost (node n1)",
		"Verification:", "not run: Error from server (Forbidden):",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("describe lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	rep := verify.JobReport{Logs: 2, Stored: 1, Unavailable: 1, Result: verify.Result{Findings: []verify.Finding{{Kind: verify.Corrupt, Item: "job.json", Detail: "not JSON"}}}}
	if err := writeDescription(&out, job, rep, nil, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "FAILED: 1 problem(s): 2 log(s), 1 stored and re-read, 1 unavailable") || !strings.Contains(out.String(), "corrupt: job.json: not JSON") {
		t.Errorf("describe of a verification with a finding:\n%s", out.String())
	}
}

// TestPrefixer: every line gets the prefix once, however the writes split it.
func TestPrefixer(t *testing.T) {
	var out bytes.Buffer
	p := &prefixer{w: &out, prefix: []byte("[pod/p/c] "), start: true}
	for _, chunk := range []string{"one\ntw", "o\n", "", "\nthree"} {
		if n, err := p.Write([]byte(chunk)); err != nil || n != len(chunk) {
			t.Fatalf("write %q: %d, %v", chunk, n, err)
		}
	}
	if want := "[pod/p/c] one\n[pod/p/c] two\n[pod/p/c] \n[pod/p/c] three"; out.String() != want {
		t.Errorf("prefixed %q, want %q", out.String(), want)
	}
}
