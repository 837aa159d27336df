package archiver

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Issue 23, item 7: a VcJob with U+0000 in an annotation's value and in a container's argument
// (Postgres' jsonb refuses it: before, every upsert of the job failed with "pq: unsupported Unicode
// escape sequence" and its finalizer was held for ever), completed then deleted, is recorded with
// both values exactly, archived, and goes away. Redaction is off: with it, both values would be
// recorded as their sha256 markers, and the database would not see a NUL.
func TestJobWithNULRecordedAndArchived(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendFS, "--redact=false")
	job := testbed.Job(s.NS, "nul").Task("worker", 1, []string{"main"}).Obj()
	const note, arg = "before\x00after", "--sep=\x00"
	metav1.SetMetaDataAnnotation(&job.ObjectMeta, "example.com/note", note)
	c := &job.Spec.Tasks[0].Template.Spec.Containers[0]
	c.Args = append(c.Args, arg)
	want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "alice", job)
	j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Completed, 2*time.Minute)
	if err := s.Env.Client.Delete(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s.Env, j, 2*time.Minute)

	row, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil {
		t.Fatalf("job row: %v", err)
	}
	if row.Annotations["example.com/note"] != note {
		t.Errorf("annotation recorded as %q, want %q", row.Annotations["example.com/note"], note)
	}
	var spec batchv1alpha1.JobSpec
	if err := json.Unmarshal(row.Spec, &spec); err != nil {
		t.Fatalf("recorded spec %q: %v", row.Spec, err)
	}
	if args := spec.Tasks[0].Template.Spec.Containers[0].Args; !slices.Contains(args, arg) {
		t.Errorf("container args recorded as %q, want them to hold %q", args, arg)
	}
	if row.ArchiveState != record.ArchiveArchived {
		t.Errorf("job row %s %q, want archived", row.ArchiveState, row.ReleaseReason)
	}
	logs, err := s.Records.LogObjects(t.Context(), string(j.UID))
	if err != nil || len(logs) != 1 {
		t.Fatalf("log rows %v (%v), want 1", logs, err)
	}
	s.CheckLog(t, logs[0], testbed.Bytes(want[testbed.PodName(job.Name, "worker", 0)]["main"].Current))
}

// Issue 23, item 7: a job whose record the database refuses for good (here U+0000 in the
// submitter-groups annotation, which Postgres' text[] cannot hold: a cluster without jobvault's
// admission policy lets a tenant write it) is not held for ever: its row is recorded without the
// refused content, and the job, completed then deleted, is released with the database's reason.
func TestRefusedRecordReleasesJob(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendFS)
	job := testbed.Job(s.NS, "refused").Task("worker", 1, []string{"main"}, testbed.RunsFor("5s")).Obj()
	stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "alice", job)
	j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Running, 2*time.Minute)
	patch := client.MergeFrom(j.DeepCopy())
	metav1.SetMetaDataAnnotation(&j.ObjectMeta, tracking.SubmitterGroupsAnnotation, `["team\u0000a"]`)
	if err := s.Env.Client.Patch(t.Context(), j, patch); err != nil {
		t.Fatal(err)
	}
	j = stack.WaitPhase(t, s.Env, job, batchv1alpha1.Completed, 2*time.Minute)
	if err := s.Env.Client.Delete(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s.Env, j, 2*time.Minute)
	row, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil {
		t.Fatalf("job row: %v", err)
	}
	if row.ArchiveState != record.ArchiveReleased || !strings.Contains(row.ReleaseReason, "the database refused the job's record") {
		t.Errorf("job row %s %q, want released: the database refused the job's record", row.ArchiveState, row.ReleaseReason)
	}
	s.ExpectEvent(t, "RecordRefused")
}
