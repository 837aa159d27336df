package performance

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
)

// BenchmarkAuditFinalize measures what the chain costs the finalization of jobs in the
// database: jobs finalized per second by 4 workers (the archiver's default --job-workers) with
// the chain (db.FinalizeJob: mark, lock the head, seal a manifest, append) against without it
// (MarkJobArchived, the finalization before the chain), alternating in rounds in one run so that
// other load on the machine weighs on both; and how long each finalization held the chain head.
// JOBVAULT_BENCH_FINALIZE_JOBS sets the jobs per round (default 400), _WORKERS the workers (4; 1
// shows what the chain's lock costs when nothing waits for it).
func BenchmarkAuditFinalize(b *testing.B) {
	records, _ := stack.OpenRecords(b)
	perRound, workers, rounds := int(envInt(b, "JOBVAULT_BENCH_FINALIZE_JOBS", 400)), int(envInt(b, "JOBVAULT_BENCH_FINALIZE_WORKERS", 4)), 3
	ctx := b.Context()
	n := 0
	prepare := func() []string {
		uids := make([]string, perRound)
		for i := range uids {
			n++
			uids[i] = fmt.Sprintf("bench-%07d", n)
			if err := records.UpsertJob(ctx, record.Job{UID: uids[i], Cluster: "eu-1", Namespace: "team", Name: uids[i], CreatedAt: stack.ChainStart, Phase: "Completed"}); err != nil {
				b.Fatal(err)
			}
		}
		return uids
	}
	// A manifest as large as a two-pod job's, sealed inside the lock as the archiver does.
	m := archive.Manifest{Version: archive.ManifestVersion, Cluster: "eu-1", RecordDigest: strings.Repeat("a", 64)}
	for p := range 2 {
		m.Pods = append(m.Pods, archive.PodEntry{Name: fmt.Sprintf("pod-%d", p), UID: strings.Repeat("u", 36), Logs: []archive.LogEntry{{Container: "main", Key: strings.Repeat("k", 120), SHA256: strings.Repeat("s", 64)}}})
		m.Rows = append(m.Rows, archive.RowDigest{Name: fmt.Sprintf("pod pod-%d", p), SHA256: strings.Repeat("d", 64)})
	}
	var (
		mu    sync.Mutex
		locks []time.Duration
	)
	finalize := func(chain bool, uid string) error {
		if !chain {
			return records.MarkJobArchived(ctx, uid, "s3://bucket/"+uid+"/", time.Now(), "")
		}
		fin, err := records.FinalizeJob(ctx, record.Finalization{Cluster: "eu-1", JobUID: uid, Location: "s3://bucket/" + uid + "/", ArchivedAt: time.Now(),
			ManifestKey: uid + "/manifest.json", RecordDigest: strings.Repeat("a", 64)}, m.Seal)
		mu.Lock()
		locks = append(locks, fin.LockHeld)
		mu.Unlock()
		return err
	}
	run := func(chain bool) time.Duration {
		uids := prepare()
		next := make(chan string)
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for uid := range next {
					if err := finalize(chain, uid); err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for _, u := range uids {
			next <- u
		}
		close(next)
		wg.Wait()
		return time.Since(start)
	}
	var with, without time.Duration
	for range rounds {
		without += run(false)
		with += run(true)
	}
	total := float64(perRound * rounds)
	rateWith, rateWithout := total/with.Seconds(), total/without.Seconds()
	slices.Sort(locks)
	p50, p99 := locks[len(locks)/2], locks[len(locks)*99/100]
	b.ReportMetric(rateWith, "chained-jobs/s")
	b.ReportMetric(rateWithout, "unchained-jobs/s")
	b.Logf("finalizations per second, %d workers, %d jobs each way: with the chain %.0f, without %.0f (ratio %.2f); chain head held p50 %s, p99 %s, max %s",
		workers, perRound*rounds, rateWith, rateWithout, rateWith/rateWithout, p50.Round(time.Microsecond), p99.Round(time.Microsecond), locks[len(locks)-1].Round(time.Microsecond))
}

// BenchmarkAuditVerify is the full proof of verification: a few thousand jobs finalized into the
// chain through audit.Sealer (the archiver's own code path, without a cluster, for speed)
// against real Postgres and MinIO, the head signed every 500, then 1,000 random tamperings of
// every kind; every one must be detected and named (the benchmark fails otherwise). It reports
// verify's time per 1,000 jobs on the untouched chain and on the tampered one.
// JOBVAULT_AUDIT_JOBS (default 3000) and JOBVAULT_AUDIT_TAMPERINGS (default 1000) set the sizes.
func BenchmarkAuditVerify(b *testing.B) {
	jobs, n := int(envInt(b, "JOBVAULT_AUDIT_JOBS", 3000)), int(envInt(b, "JOBVAULT_AUDIT_TAMPERINGS", 1000))
	r := stack.NewChainRig(b)
	start := time.Now()
	r.Build(b, jobs, 16, 500)
	b.Logf("built %d chained jobs in %s (%.0f jobs/s, 16 workers)", jobs, time.Since(start).Round(time.Second), float64(jobs)/time.Since(start).Seconds())

	clean := r.Verify(b)
	if !clean.OK() {
		b.Fatalf("untouched chain: %d findings, first %s", len(clean.Findings), clean.Findings[0])
	}
	cleanD, _ := time.ParseDuration(clean.Duration)
	tms := stack.NewTamperer(b, r, 2026).Inject(b, n)
	tampered := r.Verify(b)
	detected := stack.CheckDetected(b, tampered, tms)
	tamperedD, _ := time.ParseDuration(tampered.Duration)
	per := func(d time.Duration) time.Duration { return (d * 1000 / time.Duration(jobs)).Round(time.Millisecond) }
	b.ReportMetric(per(cleanD).Seconds(), "s-verify/1000jobs")
	b.Logf("%d/%d tamperings detected and named (%s), %d findings", detected, len(tms), stack.CountKinds(tms), len(tampered.Findings))
	b.Logf("verify of %d jobs (%d objects, %d rows, %d signed digests): untouched %s (%s per 1,000 jobs), tampered %s (%s per 1,000 jobs)",
		jobs, clean.Objects, clean.Rows, clean.Digests, cleanD.Round(time.Millisecond), per(cleanD), tamperedD.Round(time.Millisecond), per(tamperedD))
	missed, target := len(tms)-detected, targetNumber("auditTamperingsMissed")
	b.ReportMetric(float64(missed), "tamperings-missed")
	b.Logf("tamperings not detected and named: %d (target ≤ %.0f)", missed, target)
	if float64(missed) > target {
		b.Fatalf("%d of %d tamperings not detected (target ≤ %.0f)", missed, len(tms), target)
	}
}
