package db

import (
	"errors"
	"testing"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
)

// TestDBPodRowStaysWithItsJob: a pod row never moves to another job or namespace (an upsert used
// to rewrite job_uid on every call, so a forged owner moved a tenant's pod into another's record),
// and is never recorded under a job of another namespace, whichever of the two rows comes first.
// Refused rows change nothing.
func TestDBPodRowStaysWithItsJob(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	mustUpsertJob(t, records, newJob("victim").namespace("victim-ns").build())
	mustUpsertJob(t, records, newJob("own").build()) // team-a, as newPod's pods

	pod := newPod("p1", "own")
	if err := records.UpsertPod(ctx, pod); err != nil {
		t.Fatalf("UpsertPod under its own job: %v", err)
	}
	moved := pod
	moved.JobUID = "victim"
	if err := records.UpsertPod(ctx, moved); !errors.Is(err, db.ErrConflict) {
		t.Errorf("UpsertPod moving the pod to another job: %v, want ErrConflict", err)
	}
	renamespaced := pod
	renamespaced.Namespace = "victim-ns"
	if err := records.UpsertPods(ctx, []record.Pod{renamespaced}); !errors.Is(err, db.ErrConflict) {
		t.Errorf("UpsertPods moving the pod to another namespace: %v, want ErrConflict", err)
	}
	if got, err := records.Pod(ctx, "p1"); err != nil || got.JobUID != "own" || got.Namespace != "team-a" {
		t.Errorf("pod after refused moves: job %s namespace %s (%v), want own, team-a", got.JobUID, got.Namespace, err)
	}

	forged := newPod("p2", "victim") // a team-a pod claiming victim-ns's job
	if err := records.UpsertPod(ctx, forged); !errors.Is(err, db.ErrConflict) {
		t.Errorf("UpsertPod under a job of another namespace: %v, want ErrConflict", err)
	}
	if pods, err := records.Pods(ctx, "victim"); err != nil || len(pods) != 0 {
		t.Errorf("victim's pods %+v (%v), want none", pods, err)
	}
	// Before the job's row exists, the pod is recorded (the archiver has checked it); its next
	// upsert, once the job is recorded, is checked again.
	early := newPod("p3", "later")
	early.Namespace = "team-b"
	if err := records.UpsertPod(ctx, early); err != nil {
		t.Fatalf("UpsertPod before its job: %v", err)
	}
	mustUpsertJob(t, records, newJob("later").namespace("team-c").build())
	if err := records.UpsertPod(ctx, early); !errors.Is(err, db.ErrConflict) {
		t.Errorf("UpsertPod of a team-b pod once its job is recorded in team-c: %v, want ErrConflict", err)
	}
}
