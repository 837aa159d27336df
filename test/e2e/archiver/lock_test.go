package archiver

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/minio/minio-go/v7"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// finalKeys archives a two-container job with the rig and returns the keys of its final objects:
// job.json, manifest.json and every stored log, with the job's archive time.
func finalKeys(t *testing.T, s *stack.Rig) ([]string, time.Time) {
	t.Helper()
	job := testbed.Job(s.NS, "locked").Task("worker", 1, []string{"main", "side"}).Obj()
	stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main", "side"}, false)
	stack.CreateAs(t, s.Env, "alice", job)
	j := s.WaitArchived(t, job, 2*time.Minute)
	if j.Status.State.Phase != batchv1alpha1.Completed {
		t.Errorf("phase %s, want Completed", j.Status.State.Phase)
	}
	row, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil || row.ArchivedAt == nil {
		t.Fatalf("job row: %+v, %v", row, err)
	}
	logs, err := s.Records.LogObjects(t.Context(), string(j.UID))
	if err != nil || len(logs) != 2 {
		t.Fatalf("log rows: %d (%v), want 2", len(logs), err)
	}
	dir, _, ok := strings.Cut(logs[0].ObjectKey, "/pods/")
	if !ok || !strings.Contains(row.ArchiveLocation, dir) {
		t.Fatalf("log key %s is not under the job's archive %s", logs[0].ObjectKey, row.ArchiveLocation)
	}
	keys := []string{dir + "/job.json", dir + "/manifest.json"}
	for _, l := range logs {
		keys = append(keys, l.ObjectKey)
	}
	slices.Sort(keys)
	return keys, *row.ArchivedAt
}

// TestArchiveLocksFinalObjects: with --retention and --store-lock-mode, the archiver stores a
// job's final objects (job.json, manifest.json, every log object) locked until their
// finalization plus the retention, each once (a finalization repeated after a failed release keeps
// the first), and its capture segments unlocked, so that they are deleted once composed: after
// the job is archived, only its final objects are left, one version of each, all locked. On MinIO
// (a bucket with Object Lock) the lock is an S3 retention; on the fs backend, read-only files.
func TestArchiveLocksFinalObjects(t *testing.T) {
	t.Parallel()
	const retention = 2 * time.Hour
	flags := []string{"--retention=" + retention.String(), "--store-lock-mode=" + objstore.LockGovernance}

	t.Run("s3", func(t *testing.T) {
		m := testbed.MinIO(t)
		client, err := testbed.MinIOInstance(t).Client()
		if err != nil {
			t.Fatal(err)
		}
		bucket := m.Bucket + "-lock"
		if err := client.MakeBucket(t.Context(), bucket, minio.MakeBucketOptions{ObjectLocking: true}); err != nil {
			t.Fatal(err)
		}
		// The later --store-s3-bucket wins over the rig's own bucket.
		s := stack.NewRig(t, objstore.BackendS3, append(flags, "--store-s3-bucket="+bucket)...)
		start := time.Now()
		keys, archivedAt := finalKeys(t, s)

		var left []string
		for o := range client.ListObjectsIter(t.Context(), bucket, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			left = append(left, o.Key)
			mode, until, err := client.GetObjectRetention(t.Context(), bucket, o.Key, o.VersionID)
			if err != nil || mode == nil || *mode != minio.Governance || until == nil ||
				until.Before(start.Add(retention).Truncate(time.Second)) || until.After(archivedAt.Add(retention).Add(time.Second)) {
				t.Errorf("retention of %s (version %s) = %v until %v (%v), want GOVERNANCE until finalization + %s (between %s and %s)",
					o.Key, o.VersionID, mode, until, err, retention, start.Add(retention), archivedAt.Add(retention))
			}
		}
		if !slices.Equal(left, keys) {
			t.Errorf("objects and versions left in the bucket = %q, want exactly the final objects %q (segments deleted)", left, keys)
		}
	})

	t.Run("fs", func(t *testing.T) {
		s := stack.NewRig(t, objstore.BackendFS, flags...)
		keys, _ := finalKeys(t, s)
		root := s.StoreConfig.FSRoot
		var left []string
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			left = append(left, filepath.ToSlash(rel))
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if fi.Mode().Perm() != 0o444 {
				t.Errorf("mode of %s = %v, want 0444 (read-only)", rel, fi.Mode().Perm())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(left, keys) {
			t.Errorf("files left = %q, want exactly the final objects %q (segments deleted)", left, keys)
		}
		if err := s.Store.Delete(t.Context(), keys[0]); !errors.Is(err, objstore.ErrLocked) {
			t.Errorf("Delete(%s) = %v, want ErrLocked", keys[0], err)
		}
	})
}

// TestArchiveNamespaceRetention: a namespace's jobvault.io/retention replaces --retention for its
// jobs, through the real API server, the archiver's cache and its RBAC: the final objects are
// locked (read-only files, dated) until the finalization plus the namespace's retention.
func TestArchiveNamespaceRetention(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendFS, "--retention=2h", "--store-lock-mode="+objstore.LockGovernance)
	const retention = 720 * time.Hour
	ns := &corev1.Namespace{}
	if err := s.Env.Client.Get(t.Context(), client.ObjectKey{Name: s.NS}, ns); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Annotations = map[string]string{"jobvault.io/retention": retention.String()}
	if err := s.Env.Client.Patch(t.Context(), ns, patch); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	keys, archivedAt := finalKeys(t, s)
	for _, k := range keys {
		fi, err := os.Stat(filepath.Join(s.StoreConfig.FSRoot, k))
		if err != nil {
			t.Fatal(err)
		}
		until := fi.ModTime()
		if fi.Mode().Perm() != 0o444 || until.Before(start.Add(retention).Truncate(time.Second)) || until.After(archivedAt.Add(retention).Add(time.Second)) {
			t.Errorf("%s: %v until %s, want read-only until finalization + %s (between %s and %s)", k, fi.Mode().Perm(), until, retention, start.Add(retention), archivedAt.Add(retention))
		}
	}
}
