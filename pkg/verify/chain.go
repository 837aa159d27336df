package verify

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// ChainRecords is what Chain reads of the database (implemented by *db.DB).
type ChainRecords interface {
	ChainHead(ctx context.Context, cluster string) (record.ChainHead, error)
	ChainEntries(ctx context.Context, cluster string, from, to int64, fn func(record.ChainEntry) error) error
	SignedDigests(ctx context.Context, cluster string) ([]record.SignedDigest, error)
	UnchainedJobs(ctx context.Context, cluster string, since time.Time) ([]string, error)
	// A job's rows, digested again: those Job reads, and its transitions.
	JobRecords
	Transitions(ctx context.Context, jobUID string) ([]record.Transition, error)
	Prunes(ctx context.Context, cluster string, from, to int64) (map[int64]record.Prune, error)
}

// ChainOptions choose what Chain checks.
type ChainOptions struct {
	// Cluster is the chain's cluster (--cluster-name of the archiver).
	Cluster string
	// From and To bound the sequence numbers checked (inclusive); From 0 is 1, To 0 the head.
	From, To int64
	// Prefix is the archive's key prefix (--store-prefix), under which signed digests are stored.
	Prefix string
	// PublicKey checks the signed digests; nil skips their signatures (ChainReport.SignaturesChecked).
	PublicKey ed25519.PublicKey
	// Progress, when not nil, gets a line every few seconds on long runs.
	Progress io.Writer
	// Workers is how many entries are checked at once; 8 if 0.
	Workers int
}

// ChainReport is the outcome of Chain.
type ChainReport struct {
	Cluster  string `json:"cluster"`
	From     int64  `json:"from"`
	To       int64  `json:"to"`
	HeadSeq  int64  `json:"headSeq"`
	Entries  int    `json:"entries"`
	Objects  int    `json:"objects"`
	Rows     int    `json:"rows"`
	Digests  int    `json:"digests"`
	Duration string `json:"duration"`
	// SignaturesChecked is false without a public key.
	SignaturesChecked bool `json:"signaturesChecked"`
	// Result holds the findings, by seq, then item.
	Result
	// Pruned are the entries of the range whose job the retention pruner deleted, by seq: their
	// links are checked, their objects and rows are not (they are gone, as recorded).
	Pruned []Pruned `json:"pruned"`
}

// Pruned is a chain entry whose job's rows and objects the retention pruner deleted, as its
// record (audit_prunes) says.
type Pruned struct {
	Seq         int64     `json:"seq"`
	JobUID      string    `json:"jobUID"`
	RetainUntil time.Time `json:"retainUntil"`
	PrunedAt    time.Time `json:"prunedAt"`
	Policy      string    `json:"policy"`
	Objects     int       `json:"objects"`
}

// WriteText writes the findings, one a line, and a summary.
func (r ChainReport) WriteText(w io.Writer) error {
	var b strings.Builder
	r.writeFindings(&b, func(k Kind) string { return string(k) + ":" })
	by := map[Kind]int{}
	for _, f := range r.Findings {
		by[f.Kind]++
	}
	fmt.Fprintf(&b, "cluster %q, seq %d to %d (head %d): %d entries, %d objects, %d rows, %d signed digests checked in %s\n",
		r.Cluster, r.From, r.To, r.HeadSeq, r.Entries, r.Objects, r.Rows, r.Digests, r.Duration)
	for _, p := range r.Pruned {
		fmt.Fprintf(&b, "pruned: seq %d job %s: retained until %s, deleted at %s (%s), %d objects\n",
			p.Seq, p.JobUID, p.RetainUntil.Format(time.RFC3339), p.PrunedAt.Format(time.RFC3339), p.Policy, p.Objects)
	}
	if len(r.Pruned) > 0 {
		fmt.Fprintf(&b, "%d entries pruned by retention (links checked, objects and rows deleted as recorded)\n", len(r.Pruned))
	}
	if !r.SignaturesChecked {
		b.WriteString("signatures of the digests NOT checked: no public key given\n")
	}
	if r.OK() {
		b.WriteString("OK: no finding\n")
	} else {
		var kinds []string
		for _, k := range []Kind{Altered, Missing, Extra, Reordered, Forged} {
			if by[k] > 0 {
				kinds = append(kinds, fmt.Sprintf("%d %s", by[k], k))
			}
		}
		fmt.Fprintf(&b, "FAILED: %d finding(s): %s\n", len(r.Findings), strings.Join(kinds, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Chain recomputes the cluster's chain between opts.From and opts.To against the database and
// the bucket: the sequence (no number missing, each entry linked to the previous manifest's
// sha256, the head where the last entry is), every manifest and every object it lists (read back
// and hashed), every row of every job (digested again), the finalized jobs that are not in the
// chain, the objects in a job's directory that no manifest lists, and the signed digests (their
// signatures, their own chain, and the heads they pin). An entry whose job the retention pruner
// deleted (a prune record names it) is checked as an entry only and listed in ChainReport.Pruned. Each
// problem is a Finding naming the item. The error is for failures to read, not for what was found.
func Chain(ctx context.Context, records ChainRecords, store objstore.Store, opts ChainOptions) (ChainReport, error) {
	start := time.Now()
	v := &chainVerifier{records: records, store: store, opts: opts, shaSeq: map[string]int64{}, seqSHA: map[int64]string{}}
	head, err := records.ChainHead(ctx, opts.Cluster)
	if err != nil {
		return ChainReport{}, err
	}
	v.report = ChainReport{Cluster: opts.Cluster, From: max(opts.From, 1), To: opts.To, HeadSeq: head.Seq, SignaturesChecked: opts.PublicKey != nil}
	if v.report.To == 0 {
		v.report.To = head.Seq
	}
	if v.prunes, err = records.Prunes(ctx, opts.Cluster, v.report.From, v.report.To); err != nil {
		return ChainReport{}, err
	}
	if err := v.chain(ctx, head); err != nil {
		return ChainReport{}, err
	}
	sort.Slice(v.report.Pruned, func(a, b int) bool { return v.report.Pruned[a].Seq < v.report.Pruned[b].Seq })
	if err := v.digests(ctx, head); err != nil {
		return ChainReport{}, err
	}
	v.resolveSwaps()
	sort.SliceStable(v.report.Findings, func(a, b int) bool {
		fa, fb := v.report.Findings[a], v.report.Findings[b]
		if fa.Seq != fb.Seq {
			return fa.Seq < fb.Seq
		}
		return fa.Item < fb.Item
	})
	v.report.Duration = time.Since(start).Round(time.Millisecond).String()
	return v.report, nil
}

type chainVerifier struct {
	records ChainRecords
	store   objstore.Store
	opts    ChainOptions

	mu     sync.Mutex
	report ChainReport
	// shaSeq and seqSHA map manifests' sha256 to their entries and back (the range and its
	// previous entry), to name swapped manifests and check the heads signed digests pin.
	shaSeq map[string]int64
	seqSHA map[int64]string
	// swapped are the manifests found holding another sha256 than their entry's, resolved once
	// every entry is known.
	swapped []swap
	// unlinked are the entries whose previous entry is missing, checked once all are known.
	unlinked []record.ChainEntry
	// prunes are the prune records of the range, by seq.
	prunes map[int64]record.Prune
}

type swap struct {
	finding int
	sha     string
}

func (v *chainVerifier) add(f Finding) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.report.Findings = append(v.report.Findings, f)
	return len(v.report.Findings) - 1
}

func (v *chainVerifier) count(objects, rows int) {
	v.mu.Lock()
	v.report.Objects += objects
	v.report.Rows += rows
	v.mu.Unlock()
}

// chain walks the entries in order, checking each link at once and handing each entry to a
// worker for its manifest, objects and rows.
func (v *chainVerifier) chain(ctx context.Context, head record.ChainHead) error {
	from, to := v.report.From, v.report.To
	var prev *record.ChainEntry
	if from > 1 {
		if err := v.records.ChainEntries(ctx, v.opts.Cluster, from-1, from-1, func(e record.ChainEntry) error { prev = &e; return nil }); err != nil {
			return err
		}
		if prev == nil {
			v.add(Finding{Kind: Missing, Item: fmt.Sprintf("chain entry seq %d", from-1), Seq: from - 1, Detail: "the entry before the range is not in the database"})
		}
	}
	expected := from
	if prev != nil {
		v.seqSHA[prev.Seq], v.shaSeq[prev.ManifestSHA256] = prev.ManifestSHA256, prev.Seq
	}

	workers := v.opts.Workers
	if workers <= 0 {
		workers = 8
	}
	work := make(chan record.ChainEntry)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				if err := v.entry(wctx, e); err != nil {
					errc <- err
					cancel()
					return
				}
			}
		}()
	}
	lastProgress := time.Now()
	var first *record.ChainEntry
	err := v.records.ChainEntries(ctx, v.opts.Cluster, from, to, func(e record.ChainEntry) error {
		if first == nil {
			first = &e
		}
		v.link(e, prev, expected)
		v.seqSHA[e.Seq], v.shaSeq[e.ManifestSHA256] = e.ManifestSHA256, e.Seq
		v.report.Entries++
		p := e
		prev, expected = &p, e.Seq+1
		if v.opts.Progress != nil && time.Since(lastProgress) > 2*time.Second {
			fmt.Fprintf(v.opts.Progress, "audit verify: %d entries read (seq %d of %d)\n", v.report.Entries, e.Seq, to)
			lastProgress = time.Now()
		}
		e.Manifest = append([]byte(nil), e.Manifest...)
		select {
		case work <- e:
			return nil
		case <-wctx.Done():
			return wctx.Err()
		}
	})
	close(work)
	wg.Wait()
	select {
	case werr := <-errc:
		return werr
	default:
	}
	if err != nil {
		return err
	}
	// The end of the range: the head.
	if to >= head.Seq {
		for s := expected; s <= head.Seq; s++ {
			v.add(Finding{Kind: Missing, Item: fmt.Sprintf("chain entry seq %d", s), Seq: s, Detail: fmt.Sprintf("the chain head is at seq %d", head.Seq)})
		}
		if prev != nil && prev.Seq == head.Seq && prev.ManifestSHA256 != head.ManifestSHA256 {
			v.add(Finding{Kind: Altered, Item: "chain head", Seq: head.Seq, Detail: fmt.Sprintf("the head says manifest sha256 %s, its entry %s", head.ManifestSHA256, prev.ManifestSHA256)})
		}
		if err := v.records.ChainEntries(ctx, v.opts.Cluster, head.Seq+1, math.MaxInt64, func(e record.ChainEntry) error {
			v.add(Finding{Kind: Extra, Item: fmt.Sprintf("chain entry seq %d", e.Seq), Seq: e.Seq, JobUID: e.JobUID, Detail: fmt.Sprintf("beyond the chain head (seq %d)", head.Seq)})
			return nil
		}); err != nil {
			return err
		}
		if first != nil {
			since := first.At
			if from > 1 && prev != nil {
				since = first.At
			}
			uids, err := v.records.UnchainedJobs(ctx, v.opts.Cluster, since)
			if err != nil {
				return err
			}
			for _, uid := range uids {
				v.add(Finding{Kind: Extra, Item: "job " + uid, JobUID: uid, Detail: "finalized in the database but not in the chain"})
			}
		}
	}
	return nil
}

// link checks that e follows prev: the next number, and prev's manifest hash as its previous.
func (v *chainVerifier) link(e record.ChainEntry, prev *record.ChainEntry, expected int64) {
	item := fmt.Sprintf("chain entry seq %d", e.Seq)
	for s := expected; s < e.Seq; s++ {
		v.add(Finding{Kind: Missing, Item: fmt.Sprintf("chain entry seq %d", s), Seq: s, Detail: "no entry with this number in the database"})
	}
	if sum := sha256.Sum256(e.Manifest); hex.EncodeToString(sum[:]) != e.ManifestSHA256 {
		v.add(Finding{Kind: Altered, Item: item, Seq: e.Seq, JobUID: e.JobUID, Detail: "its manifest bytes do not hash to its manifest sha256"})
	}
	if prev == nil || prev.Seq != e.Seq-1 {
		if e.Seq == 1 && e.PrevSHA256 != "" {
			v.add(Finding{Kind: Reordered, Item: item, Seq: e.Seq, JobUID: e.JobUID, Detail: "the first entry names a previous manifest"})
		}
		// The entry before is missing (reported): the link cannot be checked, but a previous
		// hash that is another entry's manifest, elsewhere in the chain, still shows a move.
		v.unlinked = append(v.unlinked, e)
		return
	}
	if e.PrevSHA256 != prev.ManifestSHA256 {
		detail := fmt.Sprintf("its previous manifest sha256 is %s, but entry seq %d's is %s", short(e.PrevSHA256), prev.Seq, short(prev.ManifestSHA256))
		if s, ok := v.shaSeq[e.PrevSHA256]; ok {
			detail += fmt.Sprintf(" (it follows seq %d)", s)
		}
		v.add(Finding{Kind: Reordered, Item: item, Seq: e.Seq, JobUID: e.JobUID, Detail: detail})
	}
}

// entry checks one entry's manifest, objects and rows. The manifest checked against is the
// entry's own copy when it hashes right (a bucket copy that does not is itself a finding).
func (v *chainVerifier) entry(ctx context.Context, e record.ChainEntry) error {
	at := func(kind Kind, item, format string, args ...any) int {
		return v.add(Finding{Kind: kind, Item: item, Seq: e.Seq, JobUID: e.JobUID, Detail: fmt.Sprintf(format, args...)})
	}
	var m archive.Manifest
	if err := json.Unmarshal(e.Manifest, &m); err != nil {
		at(Altered, fmt.Sprintf("chain entry seq %d", e.Seq), "its manifest is not JSON: %v", err)
		return nil
	}
	if m.Seq != e.Seq || m.PrevSHA256 != e.PrevSHA256 || m.Job.UID != e.JobUID || m.Cluster != e.Cluster || m.RecordDigest != e.RecordDigest {
		at(Altered, fmt.Sprintf("chain entry seq %d", e.Seq), "its fields (seq, previous hash, job, cluster, record digest) differ from its manifest's")
	}
	if audit.DigestRows(m.Rows) != m.RecordDigest {
		at(Altered, "manifest "+e.ManifestKey, "its record digest is not the digest of its rows")
	}
	if p, pruned := v.prunes[e.Seq]; pruned {
		// Deleted by retention, recorded before the deletion: the entry (checked above and by
		// link) is the evidence left; what the record says must be about this entry.
		if p.JobUID != e.JobUID || p.ManifestSHA256 != e.ManifestSHA256 {
			at(Altered, fmt.Sprintf("prune record seq %d", e.Seq), "it names job %s with manifest sha256 %s, the chain entry job %s with %s",
				p.JobUID, short(p.ManifestSHA256), e.JobUID, short(e.ManifestSHA256))
		}
		v.mu.Lock()
		v.report.Pruned = append(v.report.Pruned, Pruned{Seq: e.Seq, JobUID: e.JobUID, RetainUntil: p.RetainUntil, PrunedAt: p.PrunedAt, Policy: p.Policy, Objects: len(p.Objects)})
		v.mu.Unlock()
		return nil
	}

	// The manifest in the bucket.
	h, err := audit.HashObject(ctx, v.store, e.ManifestKey, false)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		at(Missing, "manifest "+e.ManifestKey, "not in the bucket")
	case err != nil:
		return fmt.Errorf("read %s: %w", e.ManifestKey, err)
	case h.SHA256 != e.ManifestSHA256:
		i := at(Altered, "manifest "+e.ManifestKey, "sha256 %s, the chain says %s", short(h.SHA256), short(e.ManifestSHA256))
		v.mu.Lock()
		v.swapped = append(v.swapped, swap{finding: i, sha: h.SHA256})
		v.mu.Unlock()
	}

	// Every object it lists, and nothing else in the job's directory.
	logs := map[string]archive.LogEntry{}
	for _, p := range m.Pods {
		for _, l := range p.Logs {
			if l.Key != "" {
				logs[l.Key] = l
			}
		}
	}
	listed := map[string]bool{e.ManifestKey: true}
	for _, o := range m.Objects {
		listed[o.Key] = true
		l, isLog := logs[o.Key]
		h, err := audit.HashObject(ctx, v.store, o.Key, isLog)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			at(Missing, "object "+o.Key, "not in the bucket")
			continue
		case err != nil:
			return fmt.Errorf("read %s: %w", o.Key, err)
		}
		switch {
		case h.SHA256 != o.SHA256 || h.Bytes != o.Bytes:
			at(Altered, "object "+o.Key, "%d bytes with sha256 %s, the manifest says %d bytes with %s", h.Bytes, short(h.SHA256), o.Bytes, short(o.SHA256))
		case isLog && h.ContentErr != nil:
			at(Altered, "object "+o.Key, "does not decompress: %v", h.ContentErr)
		case isLog && (h.ContentSHA256 != l.SHA256 || h.ContentBytes != l.Bytes):
			at(Altered, "object "+o.Key, "its log is %d bytes with sha256 %s, the manifest says %d bytes with %s", h.ContentBytes, short(h.ContentSHA256), l.Bytes, short(l.SHA256))
		}
	}
	if err := v.store.List(ctx, path.Dir(e.ManifestKey)+"/", func(o objstore.ObjectInfo) error {
		if !listed[o.Key] {
			at(Extra, "object "+o.Key, "in the job's directory but not in its manifest")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("list %s: %w", path.Dir(e.ManifestKey), err)
	}

	// Its rows, digested again.
	rows, err := v.rows(ctx, e.JobUID)
	if err != nil {
		return err
	}
	want := map[string]string{}
	for _, r := range m.Rows {
		want[r.Name] = r.SHA256
	}
	for _, r := range rows {
		w, ok := want[r.Name]
		switch {
		case !ok:
			at(Extra, "row "+r.Name, "in the database but not in the job's record digest")
		case w != r.SHA256:
			at(Altered, "row "+r.Name, "its digest is %s, the manifest says %s", short(r.SHA256), short(w))
		}
		delete(want, r.Name)
	}
	for _, r := range m.Rows {
		if _, gone := want[r.Name]; gone {
			at(Missing, "row "+r.Name, "in the job's record digest but not in the database")
		}
	}
	v.count(len(m.Objects)+1, len(rows))
	return nil
}

// rows digests a job's rows as they are now; without a job row, the others still are.
func (v *chainVerifier) rows(ctx context.Context, uid string) ([]archive.RowDigest, error) {
	var (
		rec    audit.Record
		err    error
		noJob  bool
		wrapUp = func(what string, err error) error { return fmt.Errorf("read %s of job %s: %w", what, uid, err) }
	)
	if rec.Job, err = v.records.Job(ctx, uid); errors.Is(err, db.ErrNotFound) {
		noJob, rec.Job = true, record.Job{UID: uid}
	} else if err != nil {
		return nil, wrapUp("record", err)
	}
	if rec.Transitions, err = v.records.Transitions(ctx, uid); err != nil {
		return nil, wrapUp("transitions", err)
	}
	if rec.Pods, err = v.records.Pods(ctx, uid); err != nil {
		return nil, wrapUp("pods", err)
	}
	if rec.Logs, err = v.records.LogObjects(ctx, uid); err != nil {
		return nil, wrapUp("logs", err)
	}
	if rec.Gaps, err = v.records.Gaps(ctx, uid); err != nil {
		return nil, wrapUp("gaps", err)
	}
	_, rows := audit.RecordDigest(rec)
	if noJob {
		rows = slices.DeleteFunc(rows, func(r archive.RowDigest) bool { return r.Name == "job "+uid })
	}
	return rows, nil
}

// resolveSwaps names the entry whose manifest a mismatching bucket copy holds, and the entries
// without a previous one that name another entry's manifest as their previous.
func (v *chainVerifier) resolveSwaps() {
	for _, e := range v.unlinked {
		if s, ok := v.shaSeq[e.PrevSHA256]; ok && s != e.Seq-1 {
			v.add(Finding{Kind: Reordered, Item: fmt.Sprintf("chain entry seq %d", e.Seq), Seq: e.Seq, JobUID: e.JobUID,
				Detail: fmt.Sprintf("its previous manifest is entry seq %d's", s)})
		}
	}
	for _, s := range v.swapped {
		if seq, ok := v.shaSeq[s.sha]; ok {
			v.report.Findings[s.finding].Detail += fmt.Sprintf(": it holds the manifest of seq %d (swapped)", seq)
		}
	}
}

// digests checks the signed digests of the database and the bucket against each other, their
// signatures, their own chain, and the heads they pin within the range.
func (v *chainVerifier) digests(ctx context.Context, head record.ChainHead) error {
	rows, err := v.records.SignedDigests(ctx, v.opts.Cluster)
	if err != nil {
		return err
	}
	inBucket := map[string]bool{}
	dir := audit.DigestDir(v.opts.Prefix, v.opts.Cluster) + "/"
	if err := v.store.List(ctx, dir, func(o objstore.ObjectInfo) error { inBucket[o.Key] = true; return nil }); err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	prev := ""
	for _, r := range rows {
		item := "digest " + r.ObjectKey
		add := func(kind Kind, format string, args ...any) {
			v.add(Finding{Kind: kind, Item: item, Detail: fmt.Sprintf(format, args...)})
		}
		v.report.Digests++
		doc := r.Document
		if sum := sha256.Sum256(doc); hex.EncodeToString(sum[:]) != r.DigestSHA256 {
			add(Altered, "its database copy does not hash to its recorded sha256")
		}
		if inBucket[r.ObjectKey] {
			delete(inBucket, r.ObjectKey)
			h, err := audit.HashObject(ctx, v.store, r.ObjectKey, false)
			if err != nil {
				return fmt.Errorf("read %s: %w", r.ObjectKey, err)
			}
			if h.SHA256 != r.DigestSHA256 {
				add(Altered, "the bucket's copy has sha256 %s, the database's %s", short(h.SHA256), short(r.DigestSHA256))
				if rc, err := v.store.Get(ctx, r.ObjectKey); err == nil {
					b, _ := io.ReadAll(rc)
					rc.Close()
					v.checkSignature(item, b)
				}
			}
		} else {
			add(Missing, "recorded in the database, not in the bucket")
		}
		d := v.checkSignature(item, doc)
		if d.Seq != r.Seq || d.HeadSHA256 != r.HeadSHA256 || d.PreviousDigestSHA256 != r.PrevDigest || d.Cluster != r.Cluster {
			add(Altered, "its database row differs from its signed document")
		}
		if r.PrevDigest != prev {
			add(Reordered, "its previous digest is %s, the one before it is %s", short(r.PrevDigest), short(prev))
		}
		prev = r.DigestSHA256
		switch {
		case r.Seq > head.Seq:
			v.add(Finding{Kind: Missing, Item: fmt.Sprintf("chain entry seq %d", r.Seq), Seq: r.Seq,
				Detail: fmt.Sprintf("%s signed a head at seq %d, the chain ends at %d", item, r.Seq, head.Seq)})
		case r.Seq >= v.report.From && r.Seq <= v.report.To && r.Seq > 0:
			if sha, ok := v.seqSHA[r.Seq]; ok && sha != r.HeadSHA256 {
				v.add(Finding{Kind: Altered, Item: fmt.Sprintf("chain entry seq %d", r.Seq), Seq: r.Seq,
					Detail: fmt.Sprintf("%s signed its manifest sha256 as %s, the chain has %s", item, short(r.HeadSHA256), short(sha))})
			}
		}
	}
	for key := range inBucket {
		v.add(Finding{Kind: Extra, Item: "digest " + key, Detail: "in the bucket, not recorded in the database"})
	}
	return nil
}

// checkSignature parses a signed document and, with a public key, checks its signature.
func (v *chainVerifier) checkSignature(item string, doc []byte) audit.Digest {
	if v.opts.PublicKey == nil {
		var sd audit.SignedDocument
		if err := json.Unmarshal(doc, &sd); err != nil {
			v.add(Finding{Kind: Forged, Item: item, Detail: "not a signed digest: " + err.Error()})
		}
		return sd.Digest
	}
	d, err := audit.Open(doc, v.opts.PublicKey)
	if err != nil {
		v.add(Finding{Kind: Forged, Item: item, Detail: err.Error()})
	}
	return d
}
