package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// DefaultChunkSize is the GCSConfig.ChunkSize used when none is set.
const DefaultChunkSize = 16 << 20

// GCSConfig configures a Google Cloud Storage store.
type GCSConfig struct {
	// Bucket must exist; the store never creates it.
	Bucket string
	// ChunkSize is the resumable upload chunk size in bytes (rounded up to a multiple of 256 KiB
	// by the client); zero means DefaultChunkSize. Each Put in flight holds one chunk in memory.
	ChunkSize int
	// Timeouts bound each call.
	Timeouts Timeouts
	// LockMode is LockGovernance or LockCompliance to write objects stored with
	// PutOptions.RetainUntil under GCS object retention, mode Unlocked or Locked respectively, or
	// empty to lock nothing. The bucket must have object retention enabled.
	LockMode string
}

// GCS is a Store on Google Cloud Storage. It authenticates with application default credentials
// (workload identity, GOOGLE_APPLICATION_CREDENTIALS, ...), or not at all when
// STORAGE_EMULATOR_HOST names an emulator. An object appears only when its upload is finalized,
// so a failed Put leaves nothing under the key.
//
// With a lock mode, objects stored with PutOptions.RetainUntil get an object retention
// (Unlocked for governance, Locked for compliance), and GCS refuses to delete or replace them
// until it ends, which Put, Compose and Delete report as ErrLocked. The bucket must have object
// retention enabled (`gcloud storage buckets create --enable-per-object-retention`); it is not
// checked at start-up, as reading a bucket's metadata needs more than the object roles the
// archiver is granted: the first locked write fails instead.
type GCS struct {
	client    *storage.Client
	bucket    *storage.BucketHandle
	name      string
	chunkSize int
	timeouts  Timeouts
	lockMode  string // GCS retention mode; empty: no lock
}

var _ Store = (*GCS)(nil)

// NewGCS returns a store on cfg.Bucket. It does not contact the service; use Ping for that.
// Close releases the client.
func NewGCS(ctx context.Context, cfg GCSConfig) (*GCS, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("create GCS store: Bucket is empty")
	}
	if cfg.ChunkSize < 0 {
		return nil, fmt.Errorf("create GCS store: ChunkSize %d is negative", cfg.ChunkSize)
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if err := validLockMode(cfg.LockMode); err != nil {
		return nil, fmt.Errorf("create GCS store: LockMode: %w", err)
	}
	lockMode := map[string]string{LockGovernance: "Unlocked", LockCompliance: "Locked"}[cfg.LockMode]
	// Reads go through the XML API, pinned because the client's default is to switch to JSON:
	// JSON reads refuse ReadCompressed ("custom Accept-Encoding headers not allowed"), and
	// without it gzip-encoded objects come back
	// decompressed, breaking Get's byte-exactness. Emulators must serve XML reads too
	// (fake-gcs-server: -public-host).
	opts := []option.ClientOption{storage.WithXMLReads()}
	if os.Getenv("STORAGE_EMULATOR_HOST") != "" {
		opts = append(opts, option.WithoutAuthentication()) // emulators take no credentials
	}
	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("create GCS store: %w", err)
	}
	// Every operation here is idempotent (Put overwrites the whole object, Delete of a missing
	// object succeeds), so retrying them is safe even without preconditions, which the client's
	// default policy requires before it retries uploads and deletes.
	bucket := client.Bucket(cfg.Bucket).Retryer(storage.WithPolicy(storage.RetryAlways))
	return &GCS{
		client:    client,
		bucket:    bucket,
		name:      cfg.Bucket,
		chunkSize: cfg.ChunkSize,
		timeouts:  cfg.Timeouts.withDefaults(),
		lockMode:  lockMode,
	}, nil
}

// retention is the object retention of an object stored with opts, nil if it is not locked.
func (g *GCS) retention(opts PutOptions) *storage.ObjectRetention {
	if g.lockMode == "" || opts.RetainUntil.IsZero() {
		return nil
	}
	// GCS keeps whole seconds: rounding up never retains for less than asked.
	until := opts.RetainUntil.UTC()
	if s := until.Truncate(time.Second); !s.Equal(until) {
		until = s.Add(time.Second)
	}
	return &storage.ObjectRetention{Mode: g.lockMode, RetainUntil: until}
}

// Close releases the client's connections.
func (g *GCS) Close() error { return g.client.Close() }

// Put streams r through a resumable upload.
func (g *GCS) Put(ctx context.Context, key string, r io.Reader, opts PutOptions) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeouts.Transfer)
	defer cancel()
	obj := g.bucket.Object(key)
	if opts.IfAbsent {
		obj = obj.If(storage.Conditions{DoesNotExist: true})
	}
	w := obj.NewWriter(ctx)
	// Always explicit: a non-zero ChunkSize makes the upload resumable, so a failed chunk is
	// retried from its buffer instead of failing the whole stream (ChunkSize 0 streams in one
	// request that cannot be retried), and it caps the memory each Put holds.
	w.ChunkSize = g.chunkSize
	if l, ok := r.(interface{ Len() int }); ok {
		// Bytes already in memory (a segment, a manifest) need a buffer of their size only, in
		// whole 256 KiB units as GCS requires, not a full chunk per Put.
		w.ChunkSize = min(g.chunkSize, max(1, (l.Len()+googleapi.MinUploadChunkSize-1)/googleapi.MinUploadChunkSize)*googleapi.MinUploadChunkSize)
	}
	w.ContentType = opts.ContentType
	w.ContentEncoding = opts.ContentEncoding
	w.Retention = g.retention(opts)
	if opts.Checksum != nil {
		// GCS refuses to finalize an upload whose bytes do not have this CRC32C; the source
		// checks their sha256 before the upload is finalized.
		w.CRC32C, w.SendCRC32C = opts.Checksum.CRC32C, true
	}
	if _, err := io.Copy(w, newSource(ctx, r, opts.Checksum)); err != nil {
		// Cancelling before Close is how an upload is abandoned; a plain Close would finalize
		// the bytes written so far as the object.
		cancel()
		_ = w.Close()
		return fmt.Errorf("put %s: %w", g.URL(key), gcsIfAbsent(opts, err))
	}
	// Close finalizes the upload: this is where GCS reports most failures.
	if err := w.Close(); err != nil {
		return fmt.Errorf("put %s: %w", g.URL(key), gcsIfAbsent(opts, gcsError(err)))
	}
	return nil
}

// Get opens the object. The stored bytes are returned as they are: without ReadCompressed, GCS
// would transparently decompress objects stored with ContentEncoding gzip.
func (g *GCS) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeouts.Transfer)
	rd, err := g.bucket.Object(key).ReadCompressed(true).NewReader(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("get %s: %w", g.URL(key), gcsError(err))
	}
	return &cancelReadCloser{ReadCloser: rd, cancel: cancel}, nil
}

// Stat returns the object's stored size.
func (g *GCS) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := ValidateKey(key); err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeouts.Call)
	defer cancel()
	attrs, err := g.bucket.Object(key).Attrs(ctx)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", g.URL(key), gcsError(err))
	}
	return ObjectInfo{Key: key, Size: attrs.Size}, nil
}

// maxComposeSources is the most sources one GCS compose request takes.
const maxComposeSources = 32

// Compose has GCS compose dst from srcs, server-side. It first reads every source's metadata, to
// report a missing source as ErrNotFound (fake-gcs-server answers a compose of a missing source
// with a 500, which would be retried until the Transfer timeout) and to compose the generations
// it saw, so a source overwritten meanwhile fails the call instead of mixing versions.
//
// A compose request takes at most 32 sources, so more are composed in rounds: each run of 32
// into a temporary object "<dst>.compose-<n>", then those, until one request can compose dst.
// The temporary objects are deleted before Compose returns, whether it succeeded or not (an
// error deleting one fails the call, which may then be repeated); those a crash leaves behind are
// overwritten and deleted by the next Compose of dst from as many sources.
//
// No timeout bounds the whole call, whose length grows with the number of sources: each metadata
// read and each deletion is bounded by the Call timeout, and each compose request, which writes
// an object of up to all the sources' bytes, by the Transfer timeout.
func (g *GCS) Compose(ctx context.Context, dst string, srcs []string, opts PutOptions) (err error) {
	if err := checkCompose(dst, srcs); err != nil {
		return fmt.Errorf("compose %s: %w", dst, err)
	}
	parts := make([]*storage.ObjectHandle, len(srcs))
	for i, src := range srcs {
		err := bounded(ctx, g.timeouts.Call, func(ctx context.Context) error {
			attrs, err := g.bucket.Object(src).Attrs(ctx)
			if err == nil {
				parts[i] = g.bucket.Object(src).Generation(attrs.Generation)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("compose %s: source %s: %w", g.URL(dst), src, gcsError(err))
		}
	}

	var temps []*storage.ObjectHandle
	defer func() {
		if derr := g.deleteTemps(ctx, temps); derr != nil {
			err = errors.Join(err, fmt.Errorf("compose %s: %w", g.URL(dst), derr))
		}
	}()
	for len(parts) > maxComposeSources {
		var next []*storage.ObjectHandle
		for group := range slices.Chunk(parts, maxComposeSources) {
			if len(group) == 1 {
				next = append(next, group[0])
				continue
			}
			name := fmt.Sprintf("%s.compose-%d", dst, len(temps))
			if err := ValidateKey(name); err != nil {
				return fmt.Errorf("compose %s: temporary object: %w", g.URL(dst), err)
			}
			if slices.Contains(srcs, name) {
				return fmt.Errorf("compose %s: source %s has the name of a temporary object", g.URL(dst), name)
			}
			var tmp *storage.ObjectHandle
			err := bounded(ctx, g.timeouts.Transfer, func(ctx context.Context) error {
				attrs, err := g.bucket.Object(name).ComposerFrom(group...).Run(ctx)
				if err == nil {
					// Pinned, so that a concurrent Compose of dst overwriting it fails this one.
					tmp = g.bucket.Object(name).Generation(attrs.Generation)
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("compose %s: compose temporary object %s: %w", g.URL(dst), name, gcsError(err))
			}
			temps = append(temps, tmp)
			next = append(next, tmp)
		}
		parts = next
	}
	c := g.bucket.Object(dst).ComposerFrom(parts...)
	c.ContentType = opts.ContentType
	c.ContentEncoding = opts.ContentEncoding
	c.Retention = g.retention(opts)
	var attrs *storage.ObjectAttrs
	err = bounded(ctx, g.timeouts.Transfer, func(ctx context.Context) error {
		var err error
		attrs, err = c.Run(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("compose %s: %w", g.URL(dst), gcsError(err))
	}
	if err := g.retainComposed(ctx, attrs, c.Retention); err != nil {
		return fmt.Errorf("compose %s: %w", g.URL(dst), err)
	}
	return nil
}

// retainComposed sets the retention want on a composed object that did not get it from the
// compose request (fake-gcs-server ignores a compose's destination retention), pinned to the
// composed generation. Until then the object is unlocked; a failure fails Compose, whose retry
// writes the object again.
func (g *GCS) retainComposed(ctx context.Context, attrs *storage.ObjectAttrs, want *storage.ObjectRetention) error {
	if want == nil || (attrs.Retention != nil && !attrs.Retention.RetainUntil.Before(want.RetainUntil)) {
		return nil
	}
	return bounded(ctx, g.timeouts.Call, func(ctx context.Context) error {
		_, err := g.bucket.Object(attrs.Name).Generation(attrs.Generation).Update(ctx, storage.ObjectAttrsToUpdate{Retention: want})
		if err != nil {
			return fmt.Errorf("set retention: %w", gcsError(err))
		}
		return nil
	})
}

// deleteTemps deletes Compose's temporary objects, even after ctx ended, each within the Call
// timeout.
func (g *GCS) deleteTemps(ctx context.Context, temps []*storage.ObjectHandle) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for _, tmp := range temps {
		err := bounded(ctx, g.timeouts.Call, tmp.Delete)
		if err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
			errs = append(errs, fmt.Errorf("delete temporary object %s: %w", tmp.ObjectName(), err))
		}
	}
	return errors.Join(errs...)
}

// Delete removes the object; a missing object is not an error.
func (g *GCS) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeouts.Call)
	defer cancel()
	if err := g.bucket.Object(key).Delete(ctx); err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		return fmt.Errorf("delete %s: %w", g.URL(key), gcsError(err))
	}
	return nil
}

// List pages through the bucket; GCS returns names in lexical order.
// An error from fn stops the listing and is returned unchanged.
func (g *GCS) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeouts.Transfer)
	defer cancel()
	q := &storage.Query{Prefix: prefix}
	// Fetch only what ObjectInfo holds: smaller pages, faster listings.
	if err := q.SetAttrSelection([]string{"Name", "Size"}); err != nil {
		return fmt.Errorf("list %s: %w", g.URL(prefix), err)
	}
	it := g.bucket.Objects(ctx, q)
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", g.URL(prefix), err)
		}
		if err := fn(ObjectInfo{Key: attrs.Name, Size: attrs.Size}); err != nil {
			return err
		}
	}
}

// URL returns gs://bucket/key, unescaped, as gcloud storage and gsutil take it.
func (g *GCS) URL(key string) string { return "gs://" + g.name + "/" + key }

// Ping checks that the bucket exists and the credentials may list it. It lists at most one object
// rather than reading the bucket's metadata, because storage.buckets.get is not part of the
// object roles (roles/storage.objectAdmin) a least-privileged archiver is granted.
func (g *GCS) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeouts.Call)
	defer cancel()
	q := &storage.Query{}
	if err := q.SetAttrSelection([]string{"Name"}); err != nil {
		return fmt.Errorf("ping gs://%s: %w", g.name, err)
	}
	it := g.bucket.Objects(ctx, q)
	it.PageInfo().MaxSize = 1
	if _, err := it.Next(); err != nil && !errors.Is(err, iterator.Done) {
		return fmt.Errorf("ping gs://%s: %w", g.name, err)
	}
	return nil
}

// gcsIfAbsent is a Put's err, as ErrExists if the write was IfAbsent and GCS refused its
// DoesNotExist precondition (412): from the upload's Close, or from a Write that sent a chunk.
func gcsIfAbsent(opts PutOptions, err error) error {
	var gerr *googleapi.Error
	if opts.IfAbsent && errors.As(err, &gerr) && gerr.Code == http.StatusPreconditionFailed {
		return fmt.Errorf("%w: %w", ErrExists, err)
	}
	return err
}

// gcsError adds ErrNotFound to a missing object error, and ErrLocked to a refusal because of an
// object's retention or hold (403, with a message naming it). A missing bucket stays as it is: it
// is a configuration error, not a missing object.
func gcsError(err error) error {
	if errors.Is(err, storage.ErrObjectNotExist) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var gerr *googleapi.Error
	switch {
	case !errors.As(err, &gerr):
	case gerr.Code == http.StatusForbidden && lockMessage(gerr.Message):
		return fmt.Errorf("%w: %w", ErrLocked, err)
	case gerr.Code == http.StatusBadRequest && strings.Contains(strings.ToLower(gerr.Message), "doesn't match calculated"):
		// The upload's CRC32C or MD5 is not that of the bytes the service received.
		return fmt.Errorf("%w: %w", ErrChecksum, err)
	}
	return err
}
