package verify

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/record"
)

// The reports' text is what auditors read and scripts grep: each scope keeps the lines its
// command printed before the two verifiers became one.

func TestJobReportText(t *testing.T) {
	after := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	rep := JobReport{
		Job: archive.JobRef{Namespace: "ns", Name: "train", UID: "u1"}, ArchiveState: record.ArchiveArchived,
		Location: "file:///a/ns/train/u1/", Logs: 3, Stored: 2, Unavailable: 1,
		Result: Result{Findings: []Finding{
			{Kind: Mismatch, Item: "log of container main (current) of pod p (uid pu)", Key: "a/k.log.gz", Detail: "sha256 is x, the record says y"},
			{Kind: Missing, Item: "job.json", Key: "a/job.json", Detail: "no object, although the job is archived"},
		}},
		Unreferenced: []string{"a/stray"},
		Gaps:         []archive.GapEntry{{PodUID: "pu", Container: "main", Run: 0, After: &after, Reason: "node lost"}},
	}
	want := "MISMATCH log of container main (current) of pod p (uid pu) [a/k.log.gz]: sha256 is x, the record says y\n" +
		"MISSING job.json [a/job.json]: no object, although the job is archived\n" +
		"GAP log of container main run 0 of pod uid pu: missing output after 2026-10-01T12:00:00Z: node lost\n" +
		"NOTE unreferenced object [a/stray]: no record names it\n" +
		"FAILED: 2 problem(s) ns/train (uid u1, archived) at file:///a/ns/train/u1/: 3 log(s), 2 stored and re-read, 1 unavailable\n"
	if diff := cmp.Diff(want, text(t, rep)); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
	rep.Findings, rep.Gaps, rep.Unreferenced = nil, nil, nil
	if got := text(t, rep); !strings.HasPrefix(got, "OK ns/train ") {
		t.Errorf("text of an intact archive: %q", got)
	}
}

func TestChainReportText(t *testing.T) {
	rep := ChainReport{Cluster: "eu-1", From: 1, To: 9, HeadSeq: 9, Entries: 9, Objects: 30, Rows: 80, Digests: 2, Duration: "1s",
		Result: Result{Findings: []Finding{
			{Kind: Altered, Item: "object a/k.log.gz", Seq: 3, JobUID: "u3", Detail: "3 bytes"},
			{Kind: Forged, Item: "digest d.json", Detail: "bad signature"},
		}}}
	want := "altered: object a/k.log.gz (seq 3): 3 bytes\n" +
		"forged: digest d.json: bad signature\n" +
		`cluster "eu-1", seq 1 to 9 (head 9): 9 entries, 30 objects, 80 rows, 2 signed digests checked in 1s` + "\n" +
		"signatures of the digests NOT checked: no public key given\n" +
		"FAILED: 2 finding(s): 1 altered, 1 forged\n"
	if diff := cmp.Diff(want, text(t, rep)); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
	if got := rep.Findings[0].String(); got != "altered: object a/k.log.gz (seq 3): 3 bytes" {
		t.Errorf("String() = %q", got)
	}
}

// TestFindingJSON: a chain's finding keeps its JSON; a job's names its item as the chain's do.
func TestFindingJSON(t *testing.T) {
	for _, tc := range []struct {
		f    Finding
		want string
	}{
		{Finding{Kind: Missing, Item: "row job u", Seq: 4, JobUID: "u", Detail: "d"}, `{"kind":"missing","item":"row job u","seq":4,"jobUID":"u","detail":"d"}`},
		{Finding{Kind: Corrupt, Item: "manifest.json", Key: "a/manifest.json", Detail: "d"}, `{"kind":"corrupt","item":"manifest.json","key":"a/manifest.json","detail":"d"}`},
	} {
		b, err := json.Marshal(tc.f)
		if err != nil || string(b) != tc.want {
			t.Errorf("JSON %s, %v; want %s", b, err, tc.want)
		}
	}
}

func text(t *testing.T, r interface{ WriteText(w io.Writer) error }) string {
	t.Helper()
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
