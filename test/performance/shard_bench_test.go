package performance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// BenchmarkShards runs the same workload (JOBVAULT_BENCH_SHARD_JOBS jobs of 2 pods, default 60,
// small logs, through the real Volcano) once against one archiver and once against three shards
// (--shard 0 to 2 of --total-shards=3), each arm in its own namespace and database, and prints
// what each archiver process carried from the first job's creation to the last job's release:
// CPU seconds, peak RSS and jobs archived, with each shard's share of the single replica's.
func BenchmarkShards(b *testing.B) {
	nJobs := int(envInt(b, "JOBVAULT_BENCH_SHARD_JOBS", 60))
	for range b.N {
		env := testbed.Cluster(b)
		stack.Webhook(b, env)
		one := runShardArm(b, env, nJobs, 1)
		three := runShardArm(b, env, nJobs, 3)
		var lines []string
		lines = append(lines, fmt.Sprintf("1 replica: %.2f CPU s, peak RSS %.0f MiB, %d jobs, %s to archive all", one.procs[0].cpu, mib(one.procs[0].hwm), one.jobs[0], one.took.Round(time.Second)))
		maxCPU := 0.0
		for i, p := range three.procs {
			maxCPU = max(maxCPU, p.cpu)
			lines = append(lines, fmt.Sprintf("shard %d/3: %.2f CPU s (%.2f of 1 replica), peak RSS %.0f MiB (%.2f), %d jobs (%.2f)", i, p.cpu, p.cpu/one.procs[0].cpu,
				mib(p.hwm), float64(p.hwm)/float64(one.procs[0].hwm), three.jobs[i], float64(three.jobs[i])/float64(one.jobs[0])))
			b.ReportMetric(p.cpu/one.procs[0].cpu, fmt.Sprintf("shard%d-cpu-ratio", i))
			b.ReportMetric(float64(p.hwm)/float64(one.procs[0].hwm), fmt.Sprintf("shard%d-rss-ratio", i))
		}
		sumCPU := three.procs[0].cpu + three.procs[1].cpu + three.procs[2].cpu
		lines = append(lines, fmt.Sprintf("3 shards: %s to archive all; busiest shard %.2f of 1 replica's CPU, all three %.2f; load %s", three.took.Round(time.Second), maxCPU/one.procs[0].cpu, sumCPU/one.procs[0].cpu, loadAvg()))
		b.Log("\n" + strings.Join(lines, "\n"))
		b.ReportMetric(one.procs[0].cpu, "single-cpu-s")
		b.ReportMetric(maxCPU/one.procs[0].cpu, "busiest-shard-cpu-ratio")
		b.ReportMetric(sumCPU/one.procs[0].cpu, "all-shards-cpu-ratio")
	}
}

type shardArm struct {
	procs []proc // CPU seconds used during the arm (cpu), peak RSS (hwm)
	jobs  []int  // jobs each archived
	took  time.Duration
}

// runShardArm runs the workload against total archivers (shards when more than one).
func runShardArm(b *testing.B, env *testbed.Env, nJobs, total int) shardArm {
	b.Helper()
	ns := env.Namespace(b)
	dsn, root := testbed.Postgres(b), b.TempDir()
	archivers := make([]*stack.Archiver, total)
	for i := range archivers {
		var flags []string
		if total > 1 {
			flags = []string{fmt.Sprintf("--shard=%d", i), fmt.Sprintf("--total-shards=%d", total)}
		}
		archivers[i] = stack.NewArchiver(b, env, dsn, stack.Options{FSRoot: root, Namespaces: []string{ns}, Flags: flags})
		archivers[i].Start(b)
	}
	before := make([]proc, total)
	for i, a := range archivers {
		before[i] = sampleProc(b, a.Proc.PID())
	}
	start := time.Now()
	for i := range nJobs {
		job := testbed.Job(ns, fmt.Sprintf("load-%03d", i)).Task("w", 2, []string{"main"}).Obj()
		stack.PodLogs(b, env, ns, job.Name, map[string]int{"w": 2}, []string{"main"}, false)
		if err := env.Client.Create(b.Context(), job); err != nil {
			b.Fatal(err)
		}
	}
	deadline := start.Add(15 * time.Minute)
	for {
		var list batchv1alpha1.JobList
		if err := env.Client.List(b.Context(), &list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, j := range list.Items {
			if j.Annotations[tracking.ArchivedAtAnnotation] != "" {
				done++
			}
		}
		if done == nJobs {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs archived in 15 minutes by %d archiver(s)", done, nJobs, total)
		}
		time.Sleep(500 * time.Millisecond)
	}
	arm := shardArm{took: time.Since(start)}
	handled := 0
	for i, a := range archivers {
		p := sampleProc(b, a.Proc.PID())
		p.cpu -= before[i].cpu
		arm.procs = append(arm.procs, p)
		n := int(archiverMetrics(b, a).sum("jobvault_archiver_jobs_archived_total", nil))
		arm.jobs = append(arm.jobs, n)
		handled += n
	}
	if handled != nJobs {
		b.Errorf("%d archiver(s) archived %d jobs in all, want %d (each exactly once)", total, handled, nJobs)
	}
	for _, a := range archivers {
		a.Proc.Stop()
	}
	return arm
}
