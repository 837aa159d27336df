package archiver

import (
	"slices"
	"testing"
	"time"

	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestBacklogOldestJobsFirst: three VcJobs of four pods end a second or more apart while the
// archiver is down, named so that their names sort against their age. Started again with one pod
// worker and one stream, the archiver releases the pods of the oldest job first, then those of the
// next, and releases each job before the pods of the newest one, rather than taking the backlog
// in the order the cache happened to list it, which leaves every job waiting until nearly the whole
// backlog is done.
func TestBacklogOldestJobsFirst(t *testing.T) {
	s := stack.NewRig(t, objstore.BackendS3)
	s.Proc.Stop()
	var jobs []*batchv1alpha1.Job
	for _, name := range []string{"c-oldest", "b-middle", "a-newest"} {
		job := testbed.Job(s.NS, name).Task("w", 4, []string{"main"}).Obj()
		stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"w": 4}, []string{"main"}, false)
		stack.CreateAs(t, s.Env, "erin", job)
		stack.WaitPhase(t, s.Env, job, batchv1alpha1.Completed, 2*time.Minute)
		jobs = append(jobs, job)
		time.Sleep(1100 * time.Millisecond) // the next job's pods are created in a later second
	}
	s.Args = append(s.Args, "--pod-workers=1", "--job-workers=1", "--max-streams=1")
	s.Start(t)

	var podsDone, podsFirst, jobDone []time.Time // per job, oldest first
	for _, job := range jobs {
		j := s.WaitArchived(t, job, 3*time.Minute)
		row, err := s.Records.Job(t.Context(), string(j.UID))
		if err != nil || row.ArchivedAt == nil {
			t.Fatalf("job %s: row %+v, %v", j.Name, row, err)
		}
		pods, err := s.Records.Pods(t.Context(), string(j.UID))
		if err != nil || len(pods) != 4 {
			t.Fatalf("job %s: %d pod rows (%v), want 4", j.Name, len(pods), err)
		}
		var at []time.Time
		for _, p := range pods {
			if p.ArchivedAt == nil {
				t.Fatalf("pod %s archived, but its row has no time", p.Name)
			}
			at = append(at, *p.ArchivedAt)
		}
		podsFirst = append(podsFirst, slices.MinFunc(at, time.Time.Compare))
		podsDone = append(podsDone, slices.MaxFunc(at, time.Time.Compare))
		jobDone = append(jobDone, *row.ArchivedAt)
	}
	for i := 1; i < len(jobs); i++ {
		if !podsDone[i-1].Before(podsFirst[i]) {
			t.Errorf("a pod of %s was released at %s, before the last of the older %s at %s: the backlog was not taken oldest first",
				jobs[i].Name, podsFirst[i].Format(time.StampMicro), jobs[i-1].Name, podsDone[i-1].Format(time.StampMicro))
		}
	}
	if last := len(jobs) - 1; !jobDone[0].Before(podsDone[last]) {
		t.Errorf("the oldest job %s was released at %s, after the last pod of the newest at %s: jobs waited for the whole backlog",
			jobs[0].Name, jobDone[0].Format(time.StampMicro), podsDone[last].Format(time.StampMicro))
	}
}
