package performance

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
)

// BenchmarkAuditSealSize measures where a job's seal grows with its size (issue 28, "also
// measure"): the seal (audit.Sealer, as the archiver runs it: job.json stored, the rows read, every
// stored log hashed, the chain appended, the manifest stored) of a job of 10 pods against one of
// 1,000, each pod with one short log, against real Postgres and MinIO. It prints the seal's time
// per job and per pod at each size. JOBVAULT_BENCH_SEAL_SIZES (default "10,1000") sets the sizes.
func BenchmarkAuditSealSize(b *testing.B) {
	sizes := []int{10, 1000}
	if v := os.Getenv("JOBVAULT_BENCH_SEAL_SIZES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			var n int
			if _, err := fmt.Sscan(f, &n); err != nil || n <= 0 {
				b.Fatalf("JOBVAULT_BENCH_SEAL_SIZES=%q: want positive integers", v)
			}
			sizes = append(sizes, n)
		}
	}
	r := stack.NewChainRig(b)
	for i, pods := range sizes {
		ref := recordJobOfPods(b, r, 900000+i, pods)
		jobObject := map[string]any{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
			"metadata": map[string]any{"namespace": ref.Namespace, "name": ref.Name, "uid": ref.UID}}
		start := time.Now()
		if _, err := r.Sealer.Seal(b.Context(), ref, jobObject, "", stack.ChainStart.Add(time.Hour)); err != nil {
			b.Fatalf("seal a job of %d pods: %v", pods, err)
		}
		took := time.Since(start)
		b.ReportMetric(took.Seconds(), fmt.Sprintf("s-seal-%dpods", pods))
		b.Logf("seal of a job of %d pods (one short log each): %s, %s per pod", pods, took.Round(time.Millisecond), (took / time.Duration(pods)).Round(time.Microsecond))
	}
}

// recordJobOfPods records job i as the archiver would, with pods pods of one short stored log
// each, all archived, ready to be sealed.
func recordJobOfPods(b *testing.B, r *stack.ChainRig, i, pods int) archive.JobRef {
	b.Helper()
	ctx := context.Background()
	ref := archive.JobRef{Namespace: "team-size", Name: fmt.Sprintf("size-%d", i), UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i)}
	created := stack.ChainStart.Add(time.Duration(i) * time.Second)
	done := created.Add(90 * time.Second)
	row := record.Job{UID: ref.UID, Cluster: "eu-1", Namespace: ref.Namespace, Name: ref.Name, Queue: "default", Submitter: "alice@example.com",
		CreatedAt: created, FinishedAt: &done, Phase: "Completed", Spec: []byte(`{}`), Status: []byte(`{"state": {"phase": "Completed"}}`)}
	if err := r.Records.UpsertJob(ctx, row); err != nil {
		b.Fatal(err)
	}
	rows := make([]record.Pod, pods)
	for p := range rows {
		rows[p] = record.Pod{UID: fmt.Sprintf("%s-pod%d", ref.UID, p), JobUID: ref.UID, Namespace: ref.Namespace, Name: fmt.Sprintf("%s-worker-%d", ref.Name, p),
			Task: "worker", Node: "node-1", Phase: "Succeeded", CreatedAt: created, StartedAt: &created, FinishedAt: &done}
	}
	if err := r.Records.UpsertPods(ctx, rows); err != nil {
		b.Fatal(err)
	}
	for p, pod := range rows {
		key := stack.Must(r.Sealer.Layout.PodLog(ref, pod.Name, pod.UID, "main", record.InstanceCurrent))
		content := strings.Repeat(fmt.Sprintf("%s line of pod %d of job %d\n", created.Format(time.RFC3339), p, i), 10)
		st, err := archive.Upload(ctx, r.Store, key, strings.NewReader(content))
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Records.PutLogObject(ctx, record.LogObject{PodUID: pod.UID, Container: "main", ContainerType: record.ContainerRegular,
			Instance: record.InstanceCurrent, ObjectKey: key, Bytes: st.Bytes, StoredBytes: st.StoredBytes, SHA256: st.SHA256, State: record.LogStored}); err != nil {
			b.Fatal(err)
		}
		if err := r.Records.MarkPodArchived(ctx, pod.UID, done, ""); err != nil {
			b.Fatal(err)
		}
	}
	return ref
}
