package archiver

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Issue 23, item 12: a stored log that is gone or corrupted by the time its job is sealed (before:
// the seal failed on it for ever, and held the job's finalizer) ends the job released, with the
// object and why in the reason, within the deadline. The log is composed from segments (its 70 kB
// line is more than one), so the seal reads it back: a log written whole carries the sha256 the
// store checked, and the seal trusts that instead (issue 28; TestSealTrustsTheStoresCheckOfAShortLog
// shows that verify still finds such a log changed after its write).
func TestUnreadableStoredLogReleasesJob(t *testing.T) {
	t.Parallel()
	for name, spoil := range map[string]func(t *testing.T, s *stack.Rig, key string){
		"deleted": func(t *testing.T, s *stack.Rig, key string) {
			if err := s.Store.Delete(t.Context(), key); err != nil {
				t.Fatal(err)
			}
		},
		"corrupted": func(t *testing.T, s *stack.Rig, key string) {
			if err := s.Store.Put(t.Context(), key, bytes.NewReader([]byte("not the log")), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := stack.NewRig(t, objstore.BackendFS, "--log-deadline=5s", "--capture-segment-bytes=65536")
			// The fast task's log is stored while the slow task still runs: it is spoiled then,
			// before the job can be sealed.
			job := testbed.Job(s.NS, "spoiled").Task("fast", 1, []string{"main"}).Task("slow", 1, []string{"main"}, testbed.RunsFor("15s")).Obj()
			stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"fast": 1, "slow": 1}, []string{"main"}, false)
			stack.CreateAs(t, s.Env, "alice", job)
			j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Running, 2*time.Minute)
			var key, checked string
			if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				logs, err := s.Records.LogObjects(ctx, string(j.UID))
				for _, l := range logs {
					if l.State == record.LogStored && strings.Contains(l.ObjectKey, "-fast-") {
						key, checked = l.ObjectKey, l.StoredSHA256
					}
				}
				return key != "", err
			}); err != nil {
				t.Fatalf("the fast task's log never stored: %v", err)
			}
			if checked != "" {
				t.Fatalf("the fast task's log %s was written whole (the store checked it), so the seal will not read it back: the test's set-up is off", key)
			}
			if phase := stack.GetJob(t, s.Env, j).Status.State.Phase; phase != batchv1alpha1.Running {
				t.Fatalf("the job is %s before its fast log was spoiled: the test's timing is off", phase)
			}
			spoil(t, s, key)
			start := time.Now()
			j = s.WaitArchived(t, j, 2*time.Minute)
			t.Logf("released %s after the log was spoiled", time.Since(start).Round(100*time.Millisecond))
			row, err := s.Records.Job(t.Context(), string(j.UID))
			if err != nil || row.ArchiveState != record.ArchiveReleased || !strings.Contains(row.ReleaseReason, "1 stored log(s) unreadable when sealed") ||
				!strings.Contains(row.ReleaseReason, key) {
				t.Errorf("job row %s %q (%v), want released: 1 stored log(s) unreadable when sealed, naming %s", row.ArchiveState, row.ReleaseReason, err, key)
			}
		})
	}
}
