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
// next, and releases the oldest job before the last pod of the newest, rather than taking the
// backlog in the order the cache happened to list it, which leaves every job waiting until nearly
// the whole backlog is done.
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

	type release struct {
		pod string
		age int // the index of its job in jobs: 0 the oldest
		at  time.Time
	}
	var (
		releases []release
		jobDone  []time.Time
	)
	for i, job := range jobs {
		j := s.WaitArchived(t, job, 3*time.Minute)
		row, err := s.Records.Job(t.Context(), string(j.UID))
		if err != nil || row.ArchivedAt == nil {
			t.Fatalf("job %s: row %+v, %v", j.Name, row, err)
		}
		jobDone = append(jobDone, *row.ArchivedAt)
		pods, err := s.Records.Pods(t.Context(), string(j.UID))
		if err != nil || len(pods) != 4 {
			t.Fatalf("job %s: %d pod rows (%v), want 4", j.Name, len(pods), err)
		}
		for _, p := range pods {
			if p.ArchivedAt == nil {
				t.Fatalf("pod %s archived, but its row has no time", p.Name)
			}
			releases = append(releases, release{p.Name, i, *p.ArchivedAt})
		}
	}
	slices.SortFunc(releases, func(a, b release) int { return a.at.Compare(b.at) })
	var order []string
	for _, r := range releases {
		order = append(order, r.pod)
	}
	for i := 1; i < len(releases); i++ {
		if releases[i].age < releases[i-1].age {
			t.Errorf("pods released in the order %v: %s before the older %s, so the backlog was not taken oldest first",
				order, releases[i-1].pod, releases[i].pod)
			break
		}
	}
	newestDone := releases[len(releases)-1].at
	if !jobDone[0].Before(newestDone) {
		t.Errorf("the oldest job %s was released at %s, after the last pod at %s: jobs waited for the whole backlog",
			jobs[0].Name, jobDone[0].Format(time.StampMicro), newestDone.Format(time.StampMicro))
	}
}
