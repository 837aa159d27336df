package performance

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// BenchmarkCaptureLoadMisses measures how often the capture loses output without recording it
// under CPU load: 10 containers, one after the other, each writing 6 MiB over 6 s through 256 KiB
// rotations (TestCaptureThroughRotation's), with a busy process per CPU beside the archiver. For
// each it counts the runs of lines missing from the archive and the gaps recorded, and prints the
// miss rate: losses without a gap over losses (the target is 0: every loss is recorded). Out of
// make test: it takes about two minutes.
func BenchmarkCaptureLoadMisses(b *testing.B) {
	const jobs = 10
	s := stack.NewRig(b, objstore.BackendFS, "--node-log-max-size=262144") // the skip watch needs the nodes' rotation size
	rt := s.Env.Runtime(b, testbed.RuntimeOptions{MaxSize: 256 << 10, MaxFiles: 2})
	stack.CPUStress(b, 0)
	var lossy, missed, gapped, missingBytes int
	for i := range jobs {
		out := stack.SteadyOutput(fmt.Sprintf("load %d", i), 60, 100<<10)
		job := testbed.Job(s.NS, fmt.Sprintf("load-%d", i)).Task("w", 1, []string{"main"}, testbed.RunsFor("8s")).Obj()
		pod := testbed.PodName(job.Name, "w", 0)
		rt.Run(b, s.NS, pod, map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{out}, Every: 100 * time.Millisecond}})
		stack.CreateAs(b, s.Env, "erin", job)
		j := s.WaitArchived(b, job, 3*time.Minute)
		written := rt.Written(s.NS, pod, "main", 0)
		logs, err := s.Records.LogObjects(b.Context(), string(j.UID))
		if err != nil || len(logs) != 1 || logs[0].State != record.LogStored {
			b.Fatalf("log rows %+v (%v), want one stored", logs, err)
		}
		got, _ := s.ReadLog(b, logs[0].ObjectKey)
		gaps, err := s.Records.Gaps(b.Context(), string(j.UID))
		if err != nil {
			b.Fatal(err)
		}
		if len(gaps) > 0 {
			gapped++
		}
		if bytes.Equal(got, written) {
			continue
		}
		lossy++
		missingBytes += len(written) - len(got)
		if len(gaps) == 0 {
			missed++
		}
	}
	b.ReportMetric(float64(missed)/float64(max(lossy, 1)), "misses/loss")
	b.Logf("under load (%d busy processes): %d of %d logs lost output (%d bytes in all); %d of those without a gap (miss rate %.2f); %d logs with a gap",
		runtime.NumCPU(), lossy, jobs, missingBytes, missed, float64(missed)/float64(max(lossy, 1)), gapped)
	if rate := float64(missed) / float64(max(lossy, 1)); rate > targetNumber("captureMissRate") {
		b.Errorf("%d of %d losses without a gap, want none", missed, lossy)
	}
}
