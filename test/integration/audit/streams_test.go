package audit

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/retention"
	"github.com/jobvault/jobvault/pkg/verify"
	"github.com/jobvault/jobvault/test/stack"
)

// TestStreamsIndexSealed (issue 25): the stream index the node agent's capture leaves beside a
// log (<log key>.streams, written by capture.Assemble) is part of the job's archive: the seal
// lists it in the manifest with its size and sha256, `archiver audit verify` and `archiver logs
// verify` pass and then find it altered, and the pruner deletes it at retention. Logs without an
// index (the second pod's) are sealed as before. On the fs store with read-only locks, as in
// TestAuditRetentionPrune.
func TestStreamsIndexSealed(t *testing.T) {
	r := stack.NewChainRig(t)
	fsStore, err := objstore.NewFS(t.TempDir(), objstore.WithReadOnlyLocks())
	if err != nil {
		t.Fatal(err)
	}
	r.Store, r.Sealer.Store, r.Signer.Store = fsStore, fsStore, fsStore
	r.Sealer.RetainUntil = func(at time.Time) time.Time { return at.Add(retentionPeriod) }
	indexBytes := map[string]int64{}
	r.AfterLog = func(ctx context.Context, _ archive.JobRef, pod record.Pod, logKey string) error {
		if !strings.HasSuffix(pod.Name, "-0") {
			return nil
		}
		// What capture.Assemble writes beside a log the agent captured: here one run of stdout
		// over the whole log, locked as the log.
		h, err := audit.HashObject(ctx, fsStore, logKey, true)
		if err != nil {
			return err
		}
		index := binary.AppendUvarint(nil, uint64(h.ContentBytes)<<2|uint64(capture.StreamStdout))
		indexBytes[logKey+archive.StreamsSuffix] = int64(len(index))
		return fsStore.Put(ctx, logKey+archive.StreamsSuffix, bytes.NewReader(index),
			objstore.PutOptions{ContentType: "application/octet-stream", RetainUntil: stack.ChainStart.Add(retentionPeriod)})
	}
	r.Build(t, 2, 1, 0)
	ctx := t.Context()
	streamsKey := func(ref archive.JobRef) string {
		return stack.Must(r.Sealer.Layout.PodLog(ref, ref.Name+"-worker-0", ref.UID+"-pod0", "main", record.InstanceCurrent)) + archive.StreamsSuffix
	}

	// Sealed: listed in the manifest, and both verifiers pass.
	for _, ref := range r.Refs {
		m := readManifest(t, r, ref)
		var listed int
		for _, o := range m.Objects {
			if strings.HasSuffix(o.Key, archive.StreamsSuffix) {
				listed++
				if o.Key != streamsKey(ref) || o.Bytes != indexBytes[o.Key] || o.SHA256 == "" {
					t.Errorf("job %s: manifest lists %+v, want %s, %d bytes, with its sha256", ref.UID, o, streamsKey(ref), indexBytes[streamsKey(ref)])
				}
			}
		}
		if listed != 1 {
			t.Errorf("job %s: the manifest lists %d stream indexes, want 1 (pod 0's): %+v", ref.UID, listed, m.Objects)
		}
		if rep := logsVerify(t, r, ref); !rep.OK() || len(rep.Unreferenced) > 0 {
			t.Errorf("logs verify of job %s: findings %v, unreferenced %v; want none", ref.UID, rep.Findings, rep.Unreferenced)
		}
	}
	if rep := r.Verify(t); !rep.OK() {
		t.Fatalf("audit verify of the sealed jobs: %v", rep.Findings)
	}

	// Altered: both verifiers find it.
	altered := streamsKey(r.Refs[1])
	fsUnlocked(t, r, altered, []byte{0x05, 0x40})
	rep := r.Verify(t)
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != verify.Altered || !strings.Contains(rep.Findings[0].String(), altered) {
		t.Errorf("audit verify after the index of job 1 was altered: %v, want one finding, %s altered", rep.Findings, altered)
	}
	if lr := logsVerify(t, r, r.Refs[1]); lr.OK() {
		t.Errorf("logs verify of job 1 finds nothing wrong with its altered stream index")
	} else if !strings.Contains(fmt.Sprint(lr.Findings), altered) {
		t.Errorf("logs verify of job 1: problems %v, want one naming %s", lr.Findings, altered)
	}

	// Pruned at retention: the index goes with the log.
	r.Clock.SetTime(stack.ChainStart.Add(retentionPeriod + 24*time.Hour))
	pruner := &retention.Pruner{Records: r.Records, Store: fsStore, Cluster: "eu-1", Batch: 2, Policy: "--retention 720h0m0s", Clock: r.Clock,
		NamespaceHolds: func(context.Context) (map[string]string, error) { return nil, nil }}
	if n, err := pruner.PruneOnce(ctx); err != nil || n != 2 {
		t.Fatalf("prune: %d jobs, %v; want 2", n, err)
	}
	for _, ref := range r.Refs {
		if _, err := fsStore.Stat(ctx, streamsKey(ref)); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("job %s pruned, its stream index %s is still in the store (%v)", ref.UID, streamsKey(ref), err)
		}
	}
}

// readManifest reads a sealed job's manifest.json.
func readManifest(t *testing.T, r *stack.ChainRig, ref archive.JobRef) archive.Manifest {
	t.Helper()
	rc, err := r.Store.Get(t.Context(), stack.Must(r.Sealer.Layout.Manifest(ref)))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var m archive.Manifest
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		t.Fatalf("manifest of job %s: %v", ref.UID, err)
	}
	return m
}

// logsVerify runs `archiver logs verify` (verify.Job) on a job.
func logsVerify(t *testing.T, r *stack.ChainRig, ref archive.JobRef) verify.JobReport {
	t.Helper()
	p := stack.ChainPrefix
	rep, err := verify.Job(t.Context(), r.Records, r.Store, ref.UID, verify.JobOptions{Prefix: &p})
	if err != nil {
		t.Fatalf("logs verify of job %s: %v", ref.UID, err)
	}
	return rep
}

// fsUnlocked replaces a locked object of the fs store with b, as an attacker with the disk would.
func fsUnlocked(t *testing.T, r *stack.ChainRig, key string, b []byte) {
	t.Helper()
	if err := r.Store.(objstore.ExpiredDeleter).DeleteExpired(t.Context(), key, stack.ChainStart.Add(10*retentionPeriod)); err != nil {
		t.Fatal(err)
	}
	if err := r.Store.Put(t.Context(), key, bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}
