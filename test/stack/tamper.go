package stack

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
)

// Tampering is one change injected behind jobvault's back, and what verify must say about it.
type Tampering struct {
	What string
	Kind verify.Kind
	// Items must each be named by a finding of Kind.
	Items []string
	// Jobs and Seqs are what the change touched: findings about them are its consequences.
	Jobs []string
	Seqs []int64
}

// tamperTarget is a chained job as the Tamperer sees it.
type tamperTarget struct {
	entry    record.ChainEntry
	manifest archive.Manifest
}

// Tamperer injects random tamperings into a ChainRig's chain, each on jobs no other touched.
type Tamperer struct {
	r       *ChainRig
	rng     *mrand.Rand
	sql     *sql.DB
	targets []tamperTarget // by seq-1
	used    map[int64]bool
	digests []record.SignedDigest
	forged  int
}

// NewTamperer reads r's chain and signed digests; its random choices follow seed.
func NewTamperer(t testing.TB, r *ChainRig, seed uint64) *Tamperer {
	t.Helper()
	tp := &Tamperer{r: r, rng: mrand.New(mrand.NewPCG(seed, seed)), sql: r.Superuser(t), used: map[int64]bool{}}
	if err := r.Records.ChainEntries(t.Context(), r.Cluster, 1, 1<<62, func(e record.ChainEntry) error {
		var m archive.Manifest
		if err := json.Unmarshal(e.Manifest, &m); err != nil {
			return err
		}
		tp.targets = append(tp.targets, tamperTarget{entry: e, manifest: m})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var err error
	if tp.digests, err = r.Records.SignedDigests(t.Context(), r.Cluster); err != nil {
		t.Fatal(err)
	}
	return tp
}

// pick returns an untouched job (and marks it), or false when none is left.
func (tp *Tamperer) pick() (tamperTarget, bool) {
	for range 1000 {
		tg := tp.targets[tp.rng.IntN(len(tp.targets))]
		if !tp.used[tg.entry.Seq] {
			tp.used[tg.entry.Seq] = true
			return tg, true
		}
	}
	return tamperTarget{}, false
}

// tamperKinds are the tamperings, drawn at random with equal weight.
var tamperKinds = []string{"delete log", "flip log", "delete job.json", "flip job.json", "flip manifest", "delete manifest", "swap manifests",
	"delete log row", "edit log row", "delete transition", "edit transition", "edit job row", "delete job row", "delete pod row",
	"edit pod row", "delete gap row", "extra object", "delete chain row", "edit chain row", "re-order chain", "forge digest"}

// Inject makes n tamperings, each on its own jobs.
func (tp *Tamperer) Inject(t testing.TB, n int) []Tampering {
	t.Helper()
	var out []Tampering
	for len(out) < n {
		kind := tamperKinds[tp.rng.IntN(len(tamperKinds))]
		tm, ok, err := tp.one(t.Context(), kind)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if ok {
			out = append(out, tm)
		}
	}
	return out
}

func (tp *Tamperer) one(ctx context.Context, kind string) (Tampering, bool, error) {
	if kind == "forge digest" {
		return tp.forgeDigest(ctx)
	}
	if kind == "swap manifests" || kind == "re-order chain" {
		return tp.pair(ctx, kind)
	}
	tg, ok := tp.pick()
	if !ok {
		return Tampering{}, false, nil
	}
	e, m := tg.entry, tg.manifest
	tm := Tampering{What: kind, Jobs: []string{e.JobUID}, Seqs: []int64{e.Seq}}
	logKey := m.Objects[1+tp.rng.IntN(len(m.Objects)-1)].Key
	pod := m.Pods[tp.rng.IntN(len(m.Pods))]
	rowNamed := func(prefix string) string {
		for _, r := range m.Rows {
			if strings.HasPrefix(r.Name, prefix) {
				return r.Name
			}
		}
		return ""
	}
	var err error
	switch kind {
	case "delete log", "delete job.json", "delete manifest":
		key := map[string]string{"delete log": logKey, "delete job.json": m.JobObject, "delete manifest": e.ManifestKey}[kind]
		err = tp.r.Store.Delete(ctx, key)
		tm.Kind, tm.Items = verify.Missing, []string{tamperedItem(key, e)}
	case "flip log", "flip job.json", "flip manifest":
		key := map[string]string{"flip log": logKey, "flip job.json": m.JobObject, "flip manifest": e.ManifestKey}[kind]
		err = tp.flip(ctx, key)
		tm.Kind, tm.Items = verify.Altered, []string{tamperedItem(key, e)}
	case "delete log row":
		_, err = tp.sql.ExecContext(ctx, `DELETE FROM log_objects WHERE pod_uid = $1`, pod.UID)
		tm.Kind, tm.Items = verify.Missing, []string{"row log main/current of " + audit.PodName(pod.Name, pod.UID)}
	case "edit log row":
		_, err = tp.sql.ExecContext(ctx, `UPDATE log_objects SET bytes = bytes + 1 WHERE pod_uid = $1`, pod.UID)
		tm.Kind, tm.Items = verify.Altered, []string{"row log main/current of " + audit.PodName(pod.Name, pod.UID)}
	case "delete transition":
		_, err = tp.sql.ExecContext(ctx, `DELETE FROM job_transitions WHERE job_uid = $1 AND phase = 'Running'`, e.JobUID)
		tm.Kind, tm.Items = verify.Missing, []string{"row " + rowNamed("transition Running")}
	case "edit transition":
		_, err = tp.sql.ExecContext(ctx, `UPDATE job_transitions SET message = 'nothing to see' WHERE job_uid = $1 AND phase = 'Running'`, e.JobUID)
		tm.Kind, tm.Items = verify.Altered, []string{"row " + rowNamed("transition Running")}
	case "edit job row":
		_, err = tp.sql.ExecContext(ctx, `UPDATE jobs SET phase = 'Failed' WHERE uid = $1`, e.JobUID)
		tm.Kind, tm.Items = verify.Altered, []string{"row job " + e.JobUID}
	case "delete job row":
		_, err = tp.sql.ExecContext(ctx, `DELETE FROM jobs WHERE uid = $1`, e.JobUID)
		tm.Kind, tm.Items = verify.Missing, []string{"row job " + e.JobUID}
	case "delete pod row":
		_, err = tp.sql.ExecContext(ctx, `DELETE FROM pods WHERE uid = $1`, pod.UID)
		tm.Kind, tm.Items = verify.Missing, []string{"row " + audit.PodName(pod.Name, pod.UID)}
	case "edit pod row":
		_, err = tp.sql.ExecContext(ctx, `UPDATE pods SET node = 'elsewhere' WHERE uid = $1`, pod.UID)
		tm.Kind, tm.Items = verify.Altered, []string{"row " + audit.PodName(pod.Name, pod.UID)}
	case "delete gap row":
		if len(m.Gaps) == 0 {
			delete(tp.used, e.Seq)
			return Tampering{}, false, nil
		}
		_, err = tp.sql.ExecContext(ctx, `DELETE FROM log_gaps WHERE pod_uid = $1`, m.Gaps[0].PodUID)
		tm.Kind, tm.Items = verify.Missing, []string{"row " + rowNamed("gap ")}
	case "extra object":
		key := path.Dir(e.ManifestKey) + "/pods/planted.log.gz"
		err = tp.r.Store.Put(ctx, key, strings.NewReader("planted"), objstore.PutOptions{})
		tm.Kind, tm.Items = verify.Extra, []string{"object " + key}
	case "delete chain row":
		_, err = tp.sql.ExecContext(ctx, `DELETE FROM audit_chain WHERE cluster = $2 AND seq = $1`, e.Seq, tp.r.Cluster)
		tm.Kind, tm.Items = verify.Missing, []string{fmt.Sprintf("chain entry seq %d", e.Seq)}
	case "edit chain row":
		_, err = tp.sql.ExecContext(ctx, `UPDATE audit_chain SET record_digest = repeat('0', 64) WHERE cluster = $2 AND seq = $1`, e.Seq, tp.r.Cluster)
		tm.Kind, tm.Items = verify.Altered, []string{fmt.Sprintf("chain entry seq %d", e.Seq)}
	default:
		return Tampering{}, false, fmt.Errorf("unknown Tampering %q", kind)
	}
	return tm, true, err
}

// pair swaps two jobs' manifests, or re-orders two adjacent chain entries.
func (tp *Tamperer) pair(ctx context.Context, kind string) (Tampering, bool, error) {
	a, ok := tp.pick()
	if !ok {
		return Tampering{}, false, nil
	}
	if kind == "swap manifests" {
		b, ok := tp.pick()
		if !ok {
			return Tampering{}, false, nil
		}
		ka, kb := a.entry.ManifestKey, b.entry.ManifestKey
		for _, p := range [][2]record.ChainEntry{{a.entry, b.entry}, {b.entry, a.entry}} {
			if err := tp.r.Store.Put(ctx, p[1].ManifestKey, bytes.NewReader(p[0].Manifest), objstore.PutOptions{ContentType: "application/json"}); err != nil {
				return Tampering{}, false, err
			}
		}
		return Tampering{What: kind, Kind: verify.Altered, Items: []string{"manifest " + ka, "manifest " + kb},
			Jobs: []string{a.entry.JobUID, b.entry.JobUID}, Seqs: []int64{a.entry.Seq, b.entry.Seq}}, true, nil
	}
	// Re-order: a and the entry after it trade places; the one after those sees its link break.
	n := a.entry.Seq
	if int(n+2) > len(tp.targets) || tp.used[n+1] || tp.used[n+2] {
		delete(tp.used, n)
		return Tampering{}, false, nil
	}
	tp.used[n+1], tp.used[n+2] = true, true
	b := tp.targets[n]
	const far = 1 << 40
	for _, q := range []struct{ from, to int64 }{{n, far}, {n + 1, n}, {far, n + 1}} {
		if _, err := tp.sql.ExecContext(ctx, `UPDATE audit_chain SET seq = $2 WHERE cluster = $3 AND seq = $1`, q.from, q.to, tp.r.Cluster); err != nil {
			return Tampering{}, false, err
		}
	}
	return Tampering{What: kind, Kind: verify.Reordered, Items: []string{fmt.Sprintf("chain entry seq %d", n), fmt.Sprintf("chain entry seq %d", n+1)},
		Jobs: []string{a.entry.JobUID, b.entry.JobUID}, Seqs: []int64{n, n + 1, n + 2}}, true, nil
}

// forgeDigest replaces a signed digest in the bucket by one claiming another head, signed with
// another key.
func (tp *Tamperer) forgeDigest(ctx context.Context) (Tampering, bool, error) {
	if tp.forged >= len(tp.digests) {
		return Tampering{}, false, nil
	}
	d := tp.digests[tp.forged]
	tp.forged++
	var sd audit.SignedDocument
	if err := json.Unmarshal(d.Document, &sd); err != nil {
		return Tampering{}, false, err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Tampering{}, false, err
	}
	sd.Digest.HeadSHA256 = strings.Repeat("f", 64)
	doc := audit.Sign(sd.Digest, key)
	if err := tp.r.Store.Put(ctx, d.ObjectKey, bytes.NewReader(doc), objstore.PutOptions{ContentType: "application/json"}); err != nil {
		return Tampering{}, false, err
	}
	return Tampering{What: "forge digest", Kind: verify.Forged, Items: []string{"digest " + d.ObjectKey}}, true, nil
}

// flip changes one random byte of the object at key.
func (tp *Tamperer) flip(ctx context.Context, key string) error {
	rc, err := tp.r.Store.Get(ctx, key)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return err
	}
	b[tp.rng.IntN(len(b))] ^= byte(1 + tp.rng.IntN(255))
	return tp.r.Store.Put(ctx, key, bytes.NewReader(b), objstore.PutOptions{})
}

// tamperedItem names an object as verify does: the entry's manifest, or an object it lists.
func tamperedItem(key string, e record.ChainEntry) string {
	if key == e.ManifestKey {
		return "manifest " + key
	}
	return "object " + key
}

// CheckDetected fails unless every Tampering is named by a finding of its kind, and every finding
// is about something a Tampering touched. It returns how many tamperings were detected.
func CheckDetected(t testing.TB, rep verify.ChainReport, tms []Tampering) int {
	t.Helper()
	found := map[string]bool{}
	for _, f := range rep.Findings {
		found[string(f.Kind)+" "+f.Item] = true
	}
	jobs, seqs, items := map[string]bool{}, map[int64]bool{}, map[string]bool{}
	detected := 0
	for _, tm := range tms {
		ok := true
		for _, it := range tm.Items {
			items[it] = true
			if !found[string(tm.Kind)+" "+it] {
				ok = false
				t.Errorf("not detected: %s: %s %s", tm.What, tm.Kind, it)
			}
		}
		if ok {
			detected++
		}
		for _, j := range tm.Jobs {
			jobs[j] = true
		}
		for _, s := range tm.Seqs {
			seqs[s] = true
		}
	}
	for _, f := range rep.Findings {
		if !jobs[f.JobUID] && !seqs[f.Seq] && !items[f.Item] {
			t.Errorf("finding about nothing tampered with: %s", f)
		}
	}
	return detected
}

// CountKinds counts tamperings by what they did.
func CountKinds(tms []Tampering) string {
	by := map[string]int{}
	for _, tm := range tms {
		by[tm.What]++
	}
	var parts []string
	for _, k := range tamperKinds {
		if by[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
