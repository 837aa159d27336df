package objstore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
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
}

// S3 is a Store on an S3-compatible service, through minio-go.
//
// A failed or cancelled Put aborts its multipart upload, so no object appears under the key; parts
// of an upload whose abort request also failed are invisible to Get and List but use space until
// a bucket lifecycle rule (AbortIncompleteMultipartUpload) removes them.
type S3 struct {
	client   *minio.Client
	bucket   string
	partSize uint64
	timeouts Timeouts
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
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create S3 store: %w", err)
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
	})
	if err != nil {
		return nil, fmt.Errorf("create S3 store: %w", err)
	}
	return &S3{client: client, bucket: cfg.Bucket, partSize: cfg.PartSize, timeouts: cfg.Timeouts.withDefaults()}, nil
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
		return fmt.Errorf("put %s: %w", s.URL(key), err)
	}
	return nil
}

func (s *S3) put(ctx context.Context, key string, r io.Reader, opts PutOptions) error {
	_, err := s.client.PutObject(ctx, s.bucket, key, newSource(ctx, r), -1, minio.PutObjectOptions{
		ContentType:     opts.ContentType,
		ContentEncoding: opts.ContentEncoding,
		// Always explicit: for size -1 minio-go otherwise sizes parts for a 5 TiB object and
		// allocates a ~528 MiB buffer per upload.
		PartSize: s.partSize,
	})
	return err
}

// maxParts is the most parts an S3 multipart upload may have.
const maxParts = 10_000

// Compose first stats every source. When S3 can then assemble dst server-side (see copyable),
// each non-empty source becomes one part of a multipart upload that the service copies
// (UploadPartCopy), so no data passes through the client. Otherwise the sources are read in
// order into one streaming Put, which holds one PartSize buffer whatever their number and size.
// Either way each source is read at the version (ETag) stat saw, so a source overwritten
// meanwhile fails the call instead of mixing versions, and the whole call is bounded by the
// Transfer timeout.
//
// It does not use minio-go's ComposeObject: that stats the sources again with
// context.Background(), beyond any timeout, ignores the destination's content type and encoding
// unless they are passed as replacement metadata, and leaves the upload in place when completing
// it fails.
func (s *S3) Compose(ctx context.Context, dst string, srcs []string, opts PutOptions) error {
	if err := checkCompose(dst, srcs); err != nil {
		return fmt.Errorf("compose %s: %w", dst, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Transfer)
	defer cancel()
	var parts []s3Part // the non-empty sources: an empty one adds nothing
	sizes := make([]int64, 0, len(srcs))
	for _, src := range srcs {
		info, err := s.client.StatObject(ctx, s.bucket, src, minio.StatObjectOptions{})
		if err != nil {
			return fmt.Errorf("compose %s: source %s: %w", s.URL(dst), src, s3Error(err))
		}
		if info.Size > 0 {
			parts = append(parts, s3Part{key: src, etag: info.ETag})
			sizes = append(sizes, info.Size)
		}
	}
	var err error
	if copyable(sizes) {
		err = s.copyParts(ctx, dst, parts, opts)
	} else {
		err = s.streamParts(ctx, dst, parts, opts)
	}
	if err != nil {
		return fmt.Errorf("compose %s: %w", s.URL(dst), err)
	}
	return nil
}

// s3Part is a source of Compose at the version it was seen.
type s3Part struct{ key, etag string }

// copyable reports whether S3 can copy objects of these sizes, in order, as the parts of one
// multipart upload: at least one and at most maxParts parts, each at most MaxPartSize, all but
// the last at least MinPartSize.
func copyable(sizes []int64) bool {
	if len(sizes) == 0 || len(sizes) > maxParts {
		return false
	}
	for i, size := range sizes {
		if size > MaxPartSize || (size < MinPartSize && i < len(sizes)-1) {
			return false
		}
	}
	return true
}

// copyParts has S3 copy parts, in order, into a multipart upload of dst. A failed or cancelled
// copy aborts the upload, so nothing appears under dst.
func (s *S3) copyParts(ctx context.Context, dst string, parts []s3Part, opts PutOptions) (err error) {
	core := minio.Core{Client: s.client}
	id, err := core.NewMultipartUpload(ctx, s.bucket, dst, minio.PutObjectOptions{
		ContentType:     opts.ContentType,
		ContentEncoding: opts.ContentEncoding,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Abort even after ctx ended, which is when a cancelled or timed-out Compose gets here.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeouts.Call)
			defer cancel()
			if aerr := core.AbortMultipartUpload(ctx, s.bucket, dst, id); aerr != nil {
				err = errors.Join(err, fmt.Errorf("abort upload: %w", aerr))
			}
		}
	}()
	completed := make([]minio.CompletePart, 0, len(parts))
	for i, part := range parts {
		// Only the version whose size copyable checked.
		var cond map[string]string
		if part.etag != "" {
			cond = map[string]string{"x-amz-copy-source-if-match": `"` + part.etag + `"`}
		}
		cp, err := core.CopyObjectPart(ctx, s.bucket, part.key, s.bucket, dst, id, i+1, 0, -1, cond) // -1: whole object
		if err != nil {
			return fmt.Errorf("copy %s: %w", part.key, s3Error(err))
		}
		completed = append(completed, cp)
	}
	_, err = core.CompleteMultipartUpload(ctx, s.bucket, dst, id, completed, minio.PutObjectOptions{})
	return err
}

// streamParts reads parts, in order, into one Put of dst.
func (s *S3) streamParts(ctx context.Context, dst string, parts []s3Part, opts PutOptions) error {
	etags := make(map[string]string, len(parts))
	keys := make([]string, len(parts))
	for i, part := range parts {
		etags[part.key], keys[i] = part.etag, part.key
	}
	c := &concat{keys: keys, open: func(key string) (io.ReadCloser, error) {
		return s.open(ctx, key, etags[key])
	}}
	defer c.Close()
	return s.put(ctx, dst, c, opts)
}

// open opens the object at version etag (any version if etag is empty).
func (s *S3) open(ctx context.Context, key, etag string) (io.ReadCloser, error) {
	var opts minio.GetObjectOptions
	if etag != "" {
		if err := opts.SetMatchETag(etag); err != nil {
			return nil, err
		}
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, s3Error(err)
	}
	// GetObject is lazy; Stat sends the request so a missing key fails here, not on first Read.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, s3Error(err)
	}
	return obj, nil
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

// Delete removes the object; S3 reports success for a missing key.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Call)
	defer cancel()
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
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

// s3Error adds ErrNotFound to a NoSuchKey response. A missing bucket is a configuration error,
// not a missing object, and stays as it is.
func s3Error(err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && resp.Code == minio.NoSuchKey {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
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
