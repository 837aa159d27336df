// Package objstore is the small object storage interface jobvault writes archives through, with
// backends for S3-compatible stores (minio-go), Google Cloud Storage and a local filesystem.
package objstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"hash/crc32"
	"io"
	"time"
)

// ErrLocked is returned (wrapped) by Put, Compose and Delete when the object under the key is
// immutable (S3 Object Lock, GCS object retention, a read-only file) and the call would replace or
// remove it.
var ErrLocked = errors.New("object is locked")

// ErrNotFound is returned (wrapped) by Get and Stat when no object exists under the key, and by
// Compose when one of its sources does not exist.
var ErrNotFound = errors.New("object not found")

// PutOptions describe how an object is stored and served.
type PutOptions struct {
	// ContentType is the media type of the stored bytes' content, e.g. "text/plain; charset=utf-8".
	ContentType string
	// ContentEncoding is set to "gzip" for gzip-compressed objects, so browsers and tools decompress.
	ContentEncoding string
	// RetainUntil, when not zero, makes the object immutable (write once, read many) until then,
	// on a store configured with a lock mode (see Config.LockMode): S3 Object Lock retention or
	// GCS object retention in that mode, or a read-only file on the fs backend. Zero, or a store
	// without a lock mode, stores the object unlocked. Only final objects are locked, never
	// objects that are deleted later (capture segments).
	RetainUntil time.Time
	// Checksum, when not nil, is what the bytes given to Put hash to (ChecksumOf): the store
	// refuses to keep anything else, failing with ErrChecksum and leaving no object under the key.
	// S3 checks the sha256 itself (x-amz-checksum-sha256); GCS checks the CRC32C itself, and the
	// backend the sha256 of what it sent before finalizing the upload; the fs backend the sha256 of
	// what it wrote before renaming it into place. Compose ignores it.
	Checksum *Checksum
	// IfAbsent makes Put write once: when an object is under the key already, Put fails with
	// ErrExists and leaves that object as it is, instead of replacing it (S3 If-None-Match: *,
	// GCS's DoesNotExist precondition, a hard link on the fs backend: each checked by the store
	// at the write, not by a look before it). Compose ignores it.
	IfAbsent bool
}

// ErrExists is returned (wrapped) by Put with IfAbsent when an object is under the key already.
var ErrExists = errors.New("object exists")

// ErrChecksum is returned (wrapped) by Put when the bytes the store received do not hash to the
// Checksum given with them.
var ErrChecksum = errors.New("stored bytes do not match their checksum")

// Checksum is what an object's bytes hash to, given with Put so that the store checks what it
// received.
type Checksum struct {
	SHA256 [sha256.Size]byte
	CRC32C uint32
}

// ChecksumOf returns the checksum of b: the one place a Put's checksum is computed.
func ChecksumOf(b []byte) *Checksum {
	return &Checksum{SHA256: sha256.Sum256(b), CRC32C: crc32.Checksum(b, crc32cTable)}
}

// crc32cTable is the Castagnoli table GCS checksums with.
var crc32cTable = crc32.MakeTable(crc32.Castagnoli)

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key  string
	Size int64 // stored (possibly compressed) size in bytes
}

// Store is an object store. Every method is safe for concurrent use and idempotent: Put and Compose
// overwrite, Delete of a missing key succeeds. A Put or Compose either stores the whole object or
// leaves no trace under the key (backends upload to a temporary name or use the service's atomic
// upload).
type Store interface {
	// Put streams r into the object key without buffering it whole.
	Put(ctx context.Context, key string, r io.Reader, opts PutOptions) error
	// Get opens the object for reading; the caller closes it.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat returns the object's info.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Compose writes the concatenation of the objects srcs, in order, to dst, with opts, server-side
	// where the service allows it. dst may not be one of srcs. Like Put, it either stores the whole
	// object or leaves no trace under dst. The sources are left in place.
	Compose(ctx context.Context, dst string, srcs []string, opts PutOptions) error
	// Delete removes the object.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix, in lexical key order.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
	// URL names the object for people and tools: s3://bucket/key, gs://bucket/key or file:///path.
	URL(key string) string
	// Ping checks that the store answers and the bucket exists (readiness).
	Ping(ctx context.Context) error
}

// ExpiredDeleter is implemented by stores whose own lock does not lift when its retain-until date
// passes (the fs backend's read-only files): DeleteExpired deletes the object when it is unlocked
// or its retain-until date is at or before now, and fails with ErrLocked otherwise. The retention
// pruner uses it when the store has it, Delete otherwise (S3 and GCS allow deleting an object
// whose retention has passed).
type ExpiredDeleter interface {
	DeleteExpired(ctx context.Context, key string, now time.Time) error
}
