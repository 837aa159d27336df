package objstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const (
	// DefaultPartSize is the S3Config.PartSize used when none is set.
	DefaultPartSize = 16 << 20
	// MinPartSize is the smallest part S3 accepts for any part but the last.
	MinPartSize = 5 << 20
	// MaxPartSize is the largest part S3 accepts.
	MaxPartSize = 5 << 30
)

// S3Config configures an S3-compatible store (AWS S3, MinIO, Ceph RGW, ...).
type S3Config struct {
	// Endpoint is host[:port] without scheme, e.g. "s3.eu-west-1.amazonaws.com" or "minio:9000".
	Endpoint string
	// Bucket must exist; the store never creates it.
	Bucket string
	// Region is optional; when empty the client asks the service for the bucket's location.
	Region string
	// Secure selects HTTPS.
	Secure bool
	// CAFile is an optional PEM bundle trusted in addition to the system roots (HTTPS only).
	CAFile string
	// PathStyle addresses the bucket as endpoint/bucket instead of bucket.endpoint, which MinIO
	// and most self-hosted services need; otherwise the client picks per endpoint.
	PathStyle bool
	// AccessKey and SecretKey are the static credentials; see LoadS3Credentials.
	AccessKey, SecretKey string
	// PartSize is the multipart upload part size in bytes, between MinPartSize and MaxPartSize;
	// zero means DefaultPartSize. Each Put in flight holds one part in memory, and an object can
	// have at most 10,000 parts (160 GiB with the default).
	PartSize uint64
	// Timeouts bound each call.
	Timeouts Timeouts
	// LockMode is LockGovernance or LockCompliance to write objects stored with
	// PutOptions.RetainUntil under S3 Object Lock in that mode, or empty to lock nothing. The
	// bucket must have Object Lock enabled (see CheckLock).
	LockMode string
}

// S3 is a Store on an S3-compatible service, through minio-go.
//
// A failed or cancelled Put aborts its multipart upload, so no object appears under the key; parts
// of an upload whose abort request also failed are invisible to Get and List but use space until
// a bucket lifecycle rule (AbortIncompleteMultipartUpload) removes them.
//
// With a lock mode, objects stored with PutOptions.RetainUntil get an Object Lock retention in
// that mode, and every request that carries their bytes (the PUT of the object, each part the
// client uploads) sends a Content-MD5 header, which AWS requires of writes under Object Lock.
// Object Lock works on versions: a Put over a locked key adds a new version and the locked one
// stays, unchanged, until its retention ends. Delete removes every version of the key, as a
// plain DELETE in a versioned bucket would only add a delete marker; the service refuses to
// remove a locked version, which Delete reports as ErrLocked.
type S3 struct {
	client   *minio.Client
	bucket   string
	partSize uint64
	timeouts Timeouts
	lockMode minio.RetentionMode // empty: no lock
}

var _ Store = (*S3)(nil)

// NewS3 returns a store on cfg.Bucket. It does not contact the service; use Ping for that.
func NewS3(cfg S3Config) (*S3, error) {
	var errs []error
	if cfg.Endpoint == "" {
		errs = append(errs, errors.New("Endpoint is empty"))
	} else if strings.Contains(cfg.Endpoint, "/") {
		errs = append(errs, fmt.Errorf("Endpoint %q must be host[:port], without scheme or path", cfg.Endpoint))
	}
	if cfg.Bucket == "" {
		errs = append(errs, errors.New("Bucket is empty"))
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		errs = append(errs, errors.New("AccessKey or SecretKey is empty"))
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.PartSize < MinPartSize || cfg.PartSize > MaxPartSize {
		errs = append(errs, fmt.Errorf("PartSize %d is outside [%d, %d]", cfg.PartSize, MinPartSize, MaxPartSize))
	}
	if cfg.CAFile != "" && !cfg.Secure {
		errs = append(errs, errors.New("CAFile is set but Secure is false"))
	}
	if err := validLockMode(cfg.LockMode); err != nil {
		errs = append(errs, fmt.Errorf("LockMode: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create S3 store: %w", err)
	}
	var lockMode minio.RetentionMode
	switch cfg.LockMode {
	case LockGovernance:
		lockMode = minio.Governance
	case LockCompliance:
		lockMode = minio.Compliance
	}

	transport, err := minio.DefaultTransport(cfg.Secure)
	if err != nil {
		return nil, fmt.Errorf("create S3 store: %w", err)
	}
	if cfg.CAFile != "" {
		pool, err := loadCertPool(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("create S3 store: %w", err)
		}
		transport.TLSClientConfig.RootCAs = pool
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       cfg.Secure,
		Transport:    transport,
		Region:       cfg.Region,
		BucketLookup: lookup,
		// Needed to send a Put's checksum (PutOptions.Checksum) for the service to check.
		TrailingHeaders: true,
	})
	if err != nil {
		return nil, fmt.Errorf("create S3 store: %w", err)
	}
	return &S3{client: client, bucket: cfg.Bucket, partSize: cfg.PartSize, timeouts: cfg.Timeouts.withDefaults(), lockMode: lockMode}, nil
}

// CheckLock reports an error unless the bucket has Object Lock enabled, without which every
// locked write would fail. New calls it for a store with a lock mode.
func (s *S3) CheckLock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Call)
	defer cancel()
	enabled, _, _, _, err := s.client.GetObjectLockConfig(ctx, s.bucket)
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && resp.Code == "ObjectLockConfigurationNotFoundError" {
		err, enabled = nil, ""
	}
	if err != nil {
		return fmt.Errorf("read the Object Lock configuration of s3://%s: %w", s.bucket, err)
	}
	if enabled != "Enabled" {
		return fmt.Errorf("bucket s3://%s does not have Object Lock enabled (it can only be enabled on a versioned bucket; "+
			"with MinIO, create the bucket with `mc mb --with-lock`)", s.bucket)
	}
	return nil
}

// locks reports whether an object stored with opts is locked.
func (s *S3) locks(opts PutOptions) bool { return s.lockMode != "" && !opts.RetainUntil.IsZero() }

// putOptions are minio-go's options for writing an object with opts: its metadata and, when it
// is locked, its retention and the Content-MD5 header of every request that carries its bytes.
func (s *S3) putOptions(opts PutOptions) minio.PutObjectOptions {
	o := minio.PutObjectOptions{ContentType: opts.ContentType, ContentEncoding: opts.ContentEncoding}
	if s.locks(opts) {
		o.Mode, o.RetainUntilDate, o.SendContentMd5 = s.lockMode, opts.RetainUntil.UTC(), true
	}
	if opts.IfAbsent {
		o.SetMatchETagExcept("*") // If-None-Match: *, which the service answers 412 when the key holds an object
	}
	if opts.Checksum != nil {
		// The service checks it, and refuses the object, itself (the client needs
		// TrailingHeaders for minio-go to pass it on).
		o.UserMetadata = map[string]string{"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(opts.Checksum.SHA256[:])}
	}
	return o
}

// loadCertPool returns the system roots plus the certificates in the PEM file caFile.
func loadCertPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool() // no system roots (e.g. distroless): the CA file alone
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("read CA file %s: no PEM certificate found", caFile)
	}
	return pool, nil
}

// Put streams r as a multipart upload of unknown length, one PartSize buffer at a time.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, opts PutOptions) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Transfer)
	defer cancel()
	if err := s.put(ctx, key, r, opts); err != nil {
		return fmt.Errorf("put %s: %w", s.URL(key), s3IfAbsent(opts, err))
	}
	return nil
}

func (s *S3) put(ctx context.Context, key string, r io.Reader, opts PutOptions) error {
	// A reader that knows what it holds (a segment or a JSON document already in memory:
	// bytes.Reader, strings.Reader, bytes.Buffer) is sent as one request of that size. Of unknown
	// length, minio-go buffers a whole part first: 16 MiB for each of thousands of small segment
	// flushes would make the archiver's memory swing with the number of captures.
	size := int64(-1)
	if l, ok := r.(interface{ Len() int }); ok {
		size = int64(l.Len())
	}
	o := s.putOptions(opts)
	// Always explicit: for size -1 minio-go otherwise sizes parts for a 5 TiB object and
	// allocates a ~528 MiB buffer per upload. (It computes a locked upload's Content-MD5 from
	// that part buffer, or, for a single PUT of known size, from a buffer of that size.)
	o.PartSize = s.partSize
	if opts.Checksum != nil && size >= 0 && uint64(size) <= s.partSize && !s.locks(opts) {
		// One request whose signature covers the body's sha256, known already, which the
		// service checks the body against. minio-go's default over plain HTTP, a signature for
		// each 64 KiB chunk (aws-chunked), made both ends hash and sign the body again, and cost
		// a 64 KiB buffer a PUT (issue 28).
		o.DisableContentSha256 = true
		_, err := minio.Core{Client: s.client}.PutObject(ctx, s.bucket, key, newSource(ctx, r, nil), size, "",
			hex.EncodeToString(opts.Checksum.SHA256[:]), o)
		return s3Error(err)
	}
	_, err := s.client.PutObject(ctx, s.bucket, key, newSource(ctx, r, nil), size, o)
	return s3Error(err)
}

// maxParts is the most parts an S3 multipart upload may have.
const maxParts = 10_000

// Compose stats every source, then writes dst as a multipart upload whose parts planParts cuts
// from the sources' bytes: a part within one source of at least MinPartSize is copied by the
// service (UploadPartCopy), its bytes never passing through the client; runs of smaller sources
// are read through the client and uploaded as one part of 5 to 10 MiB, so the many small
// compressed segments of a long log cost one download and one upload of their bytes, streamed one
// part at a time without buffering it. Every source is read or copied at the version (ETag) stat saw, so a source
// overwritten meanwhile fails the call instead of mixing versions. Sources that are all empty
// make an empty object.
//
// No timeout bounds the whole call, which for a log of many GiB moves that much data: each stat,
// the upload's creation and its abort are bounded by the Call timeout, each part by the Transfer
// timeout, and completing the upload by the Transfer timeout too, because S3 assembles the parts
// before it answers, which AWS documents may take several minutes for a large upload. A failure
// aborts the upload, so nothing appears under dst; so does a plan of more than 10,000 parts
// (sources averaging under 5 MiB and adding up to more than about 50 GiB).
//
// It does not use minio-go's ComposeObject: that stats the sources again with
// context.Background(), beyond any timeout, requires every source but the last to be at least
// 5 MiB, ignores the destination's content type and encoding unless they are passed as
// replacement metadata, and leaves the upload in place when completing it fails.
func (s *S3) Compose(ctx context.Context, dst string, srcs []string, opts PutOptions) error {
	if err := checkCompose(dst, srcs); err != nil {
		return fmt.Errorf("compose %s: %w", dst, err)
	}
	sources := make([]s3Source, len(srcs))
	for i, key := range srcs {
		err := bounded(ctx, s.timeouts.Call, func(ctx context.Context) error {
			info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
			sources[i] = s3Source{key: key, etag: info.ETag, size: info.Size}
			return err
		})
		if err != nil {
			return fmt.Errorf("compose %s: source %s: %w", s.URL(dst), key, s3Error(err))
		}
	}
	parts := planParts(sources)
	var err error
	switch {
	case len(parts) > maxParts:
		err = fmt.Errorf("the %d sources need %d parts, more than the %d of an S3 upload", len(srcs), len(parts), maxParts)
	case len(parts) == 0:
		// S3 completes no upload without parts: the empty concatenation is an empty Put.
		err = bounded(ctx, s.timeouts.Call, func(ctx context.Context) error {
			_, err := s.client.PutObject(ctx, s.bucket, dst, bytes.NewReader(nil), 0, s.putOptions(opts))
			return err
		})
	default:
		err = s.upload(ctx, dst, parts, opts)
	}
	if err != nil {
		return fmt.Errorf("compose %s: %w", s.URL(dst), err)
	}
	return nil
}

// s3Source is a source of Compose at the version stat saw.
type s3Source struct {
	key, etag string
	size      int64
}

// s3Range is the bytes [off, off+n) of a source.
type s3Range struct {
	src    s3Source
	off, n int64
}

// s3Part is a part of a composed upload: the concatenation of ranges, which the service copies
// when copy is set (then there is one range) and the client uploads otherwise.
type s3Part struct {
	ranges []s3Range
	size   int64
	copy   bool
}

func (p *s3Part) add(src s3Source, off, n int64) {
	p.ranges = append(p.ranges, s3Range{src: src, off: off, n: n})
	p.size += n
}

// planParts cuts the concatenation of srcs into the parts of a multipart upload, each at most
// MaxPartSize and all but the last at least MinPartSize, copying as many bytes server-side as it
// can. A source of at least MinPartSize is copied, in as few parts as MaxPartSize allows. Smaller
// sources are gathered into a run uploaded through the client as soon as it reaches MinPartSize,
// so under 2*MinPartSize. A run still short when a large source comes is completed with the
// start of that source, or with all of it when the rest would be too small to copy, which keeps
// that part under 2*MinPartSize too. Empty sources add nothing; if all are, there is no part.
func planParts(srcs []s3Source) []s3Part {
	var parts []s3Part
	var run s3Part // to upload
	flush := func() {
		if run.size > 0 {
			parts = append(parts, run)
		}
		run = s3Part{}
	}
	for _, src := range srcs {
		var off int64
		if run.size > 0 && src.size >= MinPartSize {
			take := MinPartSize - run.size
			if src.size-take < MinPartSize {
				take = src.size
			}
			run.add(src, 0, take)
			off = take
			flush()
		}
		rest := src.size - off
		if rest >= MinPartSize {
			// Parts of equal size: with more than one, each is over MaxPartSize/2 > MinPartSize.
			n, start := (rest+MaxPartSize-1)/MaxPartSize, off
			for i := range n {
				end := start + rest*(i+1)/n
				p := s3Part{copy: true}
				p.add(src, off, end-off)
				parts = append(parts, p)
				off = end
			}
			continue
		}
		if rest > 0 {
			run.add(src, off, rest)
			if run.size >= MinPartSize {
				flush()
			}
		}
	}
	// The last part may be small: when it holds one source, the service can copy that too.
	if len(run.ranges) == 1 {
		run.copy = true
	}
	flush()
	return parts
}

// upload writes parts, in order, as a multipart upload of dst. A failure, a timeout or a
// cancellation aborts the upload, so nothing appears under dst.
func (s *S3) upload(ctx context.Context, dst string, parts []s3Part, opts PutOptions) (err error) {
	core := minio.Core{Client: s.client}
	var id string
	err = bounded(ctx, s.timeouts.Call, func(ctx context.Context) error {
		var err error
		// The retention is set when the upload is created and applies to the completed object.
		id, err = core.NewMultipartUpload(ctx, s.bucket, dst, s.putOptions(opts))
		return err
	})
	if err != nil {
		return fmt.Errorf("create upload: %w", err)
	}
	defer func() {
		if err != nil {
			// Abort even after ctx ended, which is when a cancelled Compose gets here.
			aerr := bounded(context.WithoutCancel(ctx), s.timeouts.Call, func(ctx context.Context) error {
				return core.AbortMultipartUpload(ctx, s.bucket, dst, id)
			})
			if aerr != nil {
				err = errors.Join(err, fmt.Errorf("abort upload: %w", aerr))
			}
		}
	}()
	completed := make([]minio.CompletePart, len(parts))
	for i, part := range parts {
		err := bounded(ctx, s.timeouts.Transfer, func(ctx context.Context) error {
			var err error
			if part.copy {
				completed[i], err = s.copyPart(ctx, core, dst, id, i+1, part.ranges[0])
			} else {
				completed[i], err = s.uploadPart(ctx, core, dst, id, i+1, part, s.locks(opts))
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("part %d of %d: %w", i+1, len(parts), err)
		}
	}
	err = bounded(ctx, s.timeouts.Transfer, func(ctx context.Context) error {
		_, err := core.CompleteMultipartUpload(ctx, s.bucket, dst, id, completed, minio.PutObjectOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("complete upload: %w", err)
	}
	return nil
}

// copyPart has S3 copy r into part num of upload id.
func (s *S3) copyPart(ctx context.Context, core minio.Core, dst, id string, num int, r s3Range) (minio.CompletePart, error) {
	var cond map[string]string
	if r.src.etag != "" {
		cond = map[string]string{"x-amz-copy-source-if-match": `"` + r.src.etag + `"`}
	}
	cp, err := core.CopyObjectPart(ctx, s.bucket, r.src.key, s.bucket, dst, id, num, r.off, r.n, cond)
	if err != nil {
		return cp, fmt.Errorf("copy %s: %w", r.src.key, s3Error(err))
	}
	return cp, nil
}

// uploadPart streams the ranges of part, read one after the other, into part num of upload id.
// The request has the part's size, so minio-go streams it (signed in 64 KiB chunks over HTTP)
// instead of buffering it, and does not retry it, as it cannot rewind the stream.
//
// A goroutine of its own reads the sources into a pipe: net/http may still be reading a request
// body after the request returned (when the service answers before the body is sent), so the body
// must be safe to close while it is read, which the pipe is and the sources are not.
//
// A part of a locked object needs its Content-MD5 before its bytes are sent: it is read into
// memory first (planParts keeps a part the client uploads under 2*MinPartSize, 10 MiB), then
// sent with the header. (UploadPartCopy carries no bytes and needs none.)
func (s *S3) uploadPart(ctx context.Context, core minio.Core, dst, id string, num int, part s3Part, locked bool) (minio.CompletePart, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	names := make([]string, len(part.ranges))
	for i, r := range part.ranges {
		names[i] = r.src.key
	}
	if locked {
		return s.uploadPartMD5(ctx, core, dst, id, num, part, names)
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	var readErr error // io.ErrClosedPipe once the upload stopped reading
	go func() {
		defer close(done)
		c := &concat{names: names, open: func(i int) (io.ReadCloser, error) {
			return s.openRange(ctx, part.ranges[i])
		}}
		_, readErr = io.Copy(pw, c)
		readErr = errors.Join(readErr, c.Close())
		pw.CloseWithError(readErr) // nil: the end of the part
	}()
	p, err := core.PutObjectPart(ctx, s.bucket, dst, id, num, pr, part.size, minio.PutObjectPartOptions{})
	cancel() // stops a source read in flight, so the goroutine sees the pipe closed and ends
	pr.Close()
	<-done
	if err != nil {
		if readErr != nil && !errors.Is(readErr, io.ErrClosedPipe) {
			// The sources' own error: minio-go reports some (an unexpected EOF) as a broken
			// connection, and this one names the source and keeps ErrNotFound.
			err = readErr
		}
		return minio.CompletePart{}, fmt.Errorf("upload: %w", err)
	}
	return minio.CompletePart{PartNumber: num, ETag: p.ETag}, nil
}

// uploadPartMD5 reads part into memory and uploads it with its Content-MD5.
func (s *S3) uploadPartMD5(ctx context.Context, core minio.Core, dst, id string, num int, part s3Part, names []string) (minio.CompletePart, error) {
	buf := bytes.NewBuffer(make([]byte, 0, part.size))
	c := &concat{names: names, open: func(i int) (io.ReadCloser, error) {
		return s.openRange(ctx, part.ranges[i])
	}}
	_, err := io.Copy(buf, c)
	if err = errors.Join(err, c.Close()); err != nil {
		return minio.CompletePart{}, fmt.Errorf("upload: %w", err)
	}
	if int64(buf.Len()) != part.size {
		return minio.CompletePart{}, fmt.Errorf("upload: read %d bytes of a %d-byte part", buf.Len(), part.size)
	}
	sum := md5.Sum(buf.Bytes())
	p, err := core.PutObjectPart(ctx, s.bucket, dst, id, num, bytes.NewReader(buf.Bytes()), part.size,
		minio.PutObjectPartOptions{Md5Base64: base64.StdEncoding.EncodeToString(sum[:])})
	if err != nil {
		return minio.CompletePart{}, fmt.Errorf("upload: %w", err)
	}
	return minio.CompletePart{PartNumber: num, ETag: p.ETag}, nil
}

// openRange opens the bytes of r at the version stat saw (any version if it saw no ETag).
func (s *S3) openRange(ctx context.Context, r s3Range) (io.ReadCloser, error) {
	var opts minio.GetObjectOptions
	if r.src.etag != "" {
		if err := opts.SetMatchETag(r.src.etag); err != nil {
			return nil, err
		}
	}
	if err := opts.SetRange(r.off, r.off+r.n-1); err != nil {
		return nil, err
	}
	body, _, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, r.src.key, opts)
	if err != nil {
		return nil, s3Error(err)
	}
	return body, nil
}

// Get opens the object. The stored bytes are returned as they are, even with ContentEncoding gzip.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Transfer)
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("get %s: %w", s.URL(key), s3Error(err))
	}
	// GetObject is lazy; Stat sends the request so a missing key fails here, not on first Read.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		cancel()
		return nil, fmt.Errorf("get %s: %w", s.URL(key), s3Error(err))
	}
	return &cancelReadCloser{ReadCloser: obj, cancel: cancel}, nil
}

// Stat returns the object's size.
func (s *S3) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := ValidateKey(key); err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Call)
	defer cancel()
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", s.URL(key), s3Error(err))
	}
	return ObjectInfo{Key: key, Size: info.Size}, nil
}

// Delete removes the object; S3 reports success for a missing key. With a lock mode it removes
// every version of the key (see S3), and fails with ErrLocked if one is locked.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Call)
	defer cancel()
	if s.lockMode != "" {
		return s.deleteVersions(ctx, key)
	}
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete %s: %w", s.URL(key), err)
	}
	return nil
}

// deleteVersions removes every version and delete marker of key. It never bypasses governance
// retention: a locked version stays, and the call fails with ErrLocked.
func (s *S3) deleteVersions(ctx context.Context, key string) error {
	var errs []error
	for obj := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
		if obj.Err != nil {
			return fmt.Errorf("delete %s: list versions: %w", s.URL(key), obj.Err)
		}
		if obj.Key != key {
			continue // a longer key with the same prefix
		}
		err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{VersionID: obj.VersionID})
		if err != nil {
			errs = append(errs, fmt.Errorf("version %s: %w", obj.VersionID, s3Error(err)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete %s: %w", s.URL(key), err)
	}
	return nil
}

// List pages through the bucket; S3 returns keys in UTF-8 binary (lexical) order.
// An error from fn stops the listing and is returned unchanged.
func (s *S3) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	// Cancelling on return also stops minio-go's paging when fn ends the loop early.
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Transfer)
	defer cancel()
	for obj := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("list %s: %w", s.URL(prefix), obj.Err)
		}
		if err := fn(ObjectInfo{Key: obj.Key, Size: obj.Size}); err != nil {
			return err
		}
	}
	return nil
}

// URL returns s3://bucket/key, unescaped, as the aws and mc command-line tools take it.
func (s *S3) URL(key string) string { return "s3://" + s.bucket + "/" + key }

// Ping checks that the bucket exists and the credentials may see it.
func (s *S3) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Call)
	defer cancel()
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("ping s3://%s: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("ping s3://%s: bucket does not exist", s.bucket)
	}
	return nil
}

// s3IfAbsent is a Put's err, as ErrExists if the write was IfAbsent and the service refused its
// precondition (412). Only there: other requests carry preconditions of their own (a compose's
// copy source, a ranged read's If-Match), whose failure says nothing of the kind.
func s3IfAbsent(opts PutOptions, err error) error {
	var resp minio.ErrorResponse
	// The code too: minio-go gives a failed multipart completion (its body, under a 200) no status.
	if opts.IfAbsent && errors.As(err, &resp) && (resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed") {
		return fmt.Errorf("%w: %w", ErrExists, err)
	}
	return err
}

// s3Error adds ErrNotFound to a NoSuchKey response, and ErrLocked to a refusal because of Object
// Lock (AWS answers AccessDenied, MinIO InvalidRequest, each with a message naming the lock). A
// missing bucket is a configuration error, not a missing object, and stays as it is.
func s3Error(err error) error {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return err
	}
	switch {
	case resp.Code == minio.NoSuchKey:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case resp.Code == "BadDigest" || resp.Code == "XAmzContentChecksumMismatch" || resp.Code == "XAmzContentSHA256Mismatch":
		return fmt.Errorf("%w: %w", ErrChecksum, err)
	case (resp.Code == "AccessDenied" || resp.Code == "InvalidRequest") && lockMessage(resp.Message):
		return fmt.Errorf("%w: %w", ErrLocked, err)
	}
	return err
}

// lockMessage reports whether an AccessDenied message blames a lock rather than permissions.
func lockMessage(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range []string{"worm", "object lock", "retention", "legal hold"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// LoadS3Credentials returns the S3 access and secret key. Each is read from its file when the file
// name is not empty (surrounding whitespace, such as the newline of a mounted Secret, is
// trimmed), otherwise from the environment: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, then
// MINIO_ACCESS_KEY / MINIO_SECRET_KEY. Every problem is reported at once.
func LoadS3Credentials(accessKeyFile, secretKeyFile string) (accessKey, secretKey string, err error) {
	accessKey, aerr := loadSecret("access key", accessKeyFile, "AWS_ACCESS_KEY_ID", "MINIO_ACCESS_KEY")
	secretKey, serr := loadSecret("secret key", secretKeyFile, "AWS_SECRET_ACCESS_KEY", "MINIO_SECRET_KEY")
	if err := errors.Join(aerr, serr); err != nil {
		return "", "", err
	}
	return accessKey, secretKey, nil
}

func loadSecret(what, file string, envs ...string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read S3 %s: %w", what, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("read S3 %s: file %s is empty", what, file)
		}
		return v, nil
	}
	for _, env := range envs {
		if v := strings.TrimSpace(os.Getenv(env)); v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("load S3 %s: no file given and %s unset", what, strings.Join(envs, ", "))
}
