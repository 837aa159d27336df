package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/metrics"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// PruneRecords is what the pruner reads and writes in the database (implemented by *db.DB).
type PruneRecords interface {
	PruneCandidates(ctx context.Context, cluster string, now time.Time, namespaceHolds map[string]string, limit int) ([]record.PruneCandidate, error)
	RecordPrunes(ctx context.Context, prunes []record.Prune) error
	DeletePrunedRows(ctx context.Context, jobUIDs []string) (int64, error)
}

// Pruner deletes the rows and objects of finalized jobs whose retain-until date (jobs.retain_until,
// recorded at finalization) has passed and that no legal hold holds, in batches. It runs on the
// leader only, periodically (Pass).
//
// The order never leaves a chain entry pointing at deleted data without a record of why: first the
// prune record (audit_prunes: the job's chain entry, retain-until date, policy and objects), then
// the objects, then the rows, in one transaction per batch run as the pruner (SET LOCAL
// jobvault.prune = 'on'). A crash in between leaves the rows, so the job is a candidate again and
// the next pass finishes it; its record is already there. The chain entry itself stays: audit
// verify checks the chain through it and reports the job as pruned.
type Pruner struct {
	Records PruneRecords
	Store   objstore.Store
	Cluster string
	// Batch is how many jobs a batch prunes (100 if 0).
	Batch int
	// Policy describes the retention applied, recorded with each prune (e.g. "--retention 720h0m0s").
	Policy string
	// NamespaceHolds returns the jobvault.io/legal-hold annotation of each namespace that has
	// one (NamespaceHolds); nil: none. The database decides which values hold, for namespaces as
	// for jobs. A pass whose holds cannot be read deletes nothing.
	NamespaceHolds func(ctx context.Context) (map[string]string, error)
	Clock          clock.PassiveClock
}

// Pass is the pruner's periodic task (a periodic.Runnable, on the leader): one PruneOnce.
func (p *Pruner) Pass(ctx context.Context) error {
	n, err := p.PruneOnce(ctx)
	if err != nil {
		return fmt.Errorf("retention pruning (%d jobs pruned): %w", n, err)
	}
	if n > 0 {
		logr.FromContextOrDiscard(ctx).Info("Pruned finalized jobs past their retain-until date", "jobs", n)
	}
	return nil
}

// PruneOnce deletes every job prunable now, a batch at a time, and returns how many it deleted.
// A job whose objects cannot be deleted yet (a store lock later than its recorded date) keeps its
// rows and is reported in the error; the others of its batch go on.
func (p *Pruner) PruneOnce(ctx context.Context) (int, error) {
	var held map[string]string
	if p.NamespaceHolds != nil {
		var err error
		if held, err = p.NamespaceHolds(ctx); err != nil {
			return 0, fmt.Errorf("read namespace legal holds: %w", err)
		}
	}
	batch := p.Batch
	if batch <= 0 {
		batch = 100
	}
	now := p.Clock.Now().UTC()
	pruned := 0
	failed := map[string]bool{}
	var errs []error
	for {
		cands, err := p.Records.PruneCandidates(ctx, p.Cluster, now, held, batch+len(failed))
		if err != nil {
			return pruned, errors.Join(append(errs, err)...)
		}
		var todo []record.PruneCandidate
		for _, c := range cands {
			if !failed[c.Entry.JobUID] {
				todo = append(todo, c)
			}
		}
		if len(todo) == 0 {
			return pruned, errors.Join(errs...)
		}
		before := len(failed)
		n, err := p.pruneBatch(ctx, todo, now, failed)
		pruned += n
		if err != nil {
			errs = append(errs, err)
		}
		if n == 0 && len(failed) == before {
			// No progress (the prune records could not be written): the next pass retries.
			return pruned, errors.Join(errs...)
		}
	}
}

// pruneBatch records, then deletes the objects, then the rows of the candidates; a job whose
// objects could not all be deleted goes into failed and keeps its rows.
func (p *Pruner) pruneBatch(ctx context.Context, cands []record.PruneCandidate, now time.Time, failed map[string]bool) (int, error) {
	prunes := make([]record.Prune, 0, len(cands))
	for _, c := range cands {
		var m archive.Manifest
		if err := json.Unmarshal(c.Entry.Manifest, &m); err != nil {
			// Its entry is unreadable: verify reports it; deleting would hide the evidence.
			failed[c.Entry.JobUID] = true
			metrics.PrunedJobsTotal.WithLabelValues("error").Inc()
			return 0, fmt.Errorf("job %s: chain entry seq %d: manifest: %w", c.Entry.JobUID, c.Entry.Seq, err)
		}
		objects := make([]string, 0, len(m.Objects)+1)
		for _, o := range m.Objects {
			objects = append(objects, o.Key)
		}
		objects = append(objects, c.Entry.ManifestKey)
		prunes = append(prunes, record.Prune{Cluster: c.Entry.Cluster, Seq: c.Entry.Seq, JobUID: c.Entry.JobUID, ManifestSHA256: c.Entry.ManifestSHA256,
			RetainUntil: c.RetainUntil, Policy: p.Policy, Objects: objects, PrunedAt: now})
	}
	if err := p.Records.RecordPrunes(ctx, prunes); err != nil {
		return 0, err
	}
	var (
		done []string
		errs []error
	)
	for _, pr := range prunes {
		if err := p.deleteObjects(ctx, pr.Objects, now); err != nil {
			failed[pr.JobUID] = true
			metrics.PrunedJobsTotal.WithLabelValues("error").Inc()
			errs = append(errs, fmt.Errorf("job %s: %w", pr.JobUID, err))
			continue
		}
		done = append(done, pr.JobUID)
	}
	if len(done) == 0 {
		return 0, errors.Join(errs...)
	}
	n, err := p.Records.DeletePrunedRows(ctx, done)
	if err != nil || n < int64(len(done)) {
		// Not deleted (an error, or a hold placed meanwhile): not again in this pass.
		for _, uid := range done {
			failed[uid] = true
		}
	}
	if err != nil {
		return 0, errors.Join(append(errs, err)...)
	}
	metrics.PrunedJobsTotal.WithLabelValues("pruned").Add(float64(n))
	return int(n), errors.Join(errs...)
}

// deleteObjects deletes keys, through the store's DeleteExpired when it has one (the fs backend,
// whose read-only files do not unlock by themselves).
func (p *Pruner) deleteObjects(ctx context.Context, keys []string, now time.Time) error {
	del := p.Store.Delete
	if ed, ok := p.Store.(objstore.ExpiredDeleter); ok {
		del = func(ctx context.Context, key string) error { return ed.DeleteExpired(ctx, key, now) }
	}
	for _, k := range keys {
		if err := del(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// NamespaceHolds returns a Pruner.NamespaceHolds that lists the namespaces, uncached, and returns
// the legal hold annotation of those that have one.
func NamespaceHolds(reader client.Reader) func(ctx context.Context) (map[string]string, error) {
	return func(ctx context.Context) (map[string]string, error) {
		var list corev1.NamespaceList
		if err := reader.List(ctx, &list); err != nil {
			return nil, err
		}
		holds := map[string]string{}
		for _, ns := range list.Items {
			if v, ok := ns.Annotations[tracking.LegalHoldAnnotation]; ok {
				holds[ns.Name] = v
			}
		}
		return holds, nil
	}
}
