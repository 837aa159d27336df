package objstore

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Backend names accepted by Config.Backend.
const (
	BackendFS  = "fs"
	BackendS3  = "s3"
	BackendGCS = "gcs"
)

// Lock modes accepted by Config.LockMode: how a backend locks objects stored with
// PutOptions.RetainUntil.
const (
	// LockGovernance: S3 Object Lock governance mode, GCS retention mode Unlocked. Users with
	// the bypass permission (s3:BypassGovernanceRetention, GCS overrideUnlockedRetention) can
	// still shorten the retention or delete the object; nobody else can.
	LockGovernance = "governance"
	// LockCompliance: S3 Object Lock compliance mode, GCS retention mode Locked. Nobody, not even
	// the account's root user, can delete the object or shorten its retention before it ends.
	LockCompliance = "compliance"
)

// Timeouts bound every backend call, on top of the caller's context, so that a hung service
// fails the call instead of blocking a reconcile (and with it namespace deletion) forever.
type Timeouts struct {
	// Call bounds Stat, Delete and Ping, and each metadata request of a Compose (reading a
	// source's size, creating or aborting an upload, deleting a temporary object). Zero means
	// DefaultCallTimeout.
	Call time.Duration
	// Transfer bounds Put (the whole upload), Get (from the call until the reader is closed) and
	// List (the whole listing), which move data or may page through many objects, and each step
	// of a Compose that moves data (a part of an S3 upload, its completion, a GCS compose
	// request). No timeout bounds a whole Compose: it moves as much data as its sources hold.
	// Zero means DefaultTransferTimeout.
	Transfer time.Duration
}

const (
	// DefaultCallTimeout is the Timeouts.Call used when none is set.
	DefaultCallTimeout = 30 * time.Second
	// DefaultTransferTimeout is the Timeouts.Transfer used when none is set.
	DefaultTransferTimeout = 5 * time.Minute
)

func (t Timeouts) withDefaults() Timeouts {
	if t.Call <= 0 {
		t.Call = DefaultCallTimeout
	}
	if t.Transfer <= 0 {
		t.Transfer = DefaultTransferTimeout
	}
	return t
}

// Config selects and configures one backend; BindFlags fills it from the command line and New
// builds the Store. Only the selected backend's fields are read.
type Config struct {
	// Backend is BackendFS (also when empty), BackendS3 or BackendGCS.
	Backend string
	// Timeouts bound every backend call; New uses them in place of S3.Timeouts and GCS.Timeouts.
	Timeouts Timeouts
	// LockMode is LockGovernance or LockCompliance to lock the objects stored with
	// PutOptions.RetainUntil, or empty to lock nothing. New uses it in place of S3.LockMode and
	// GCS.LockMode; the fs backend makes locked objects read-only files in either mode.
	LockMode string
	// FSRoot is the root directory of the filesystem backend.
	FSRoot string
	// S3 configures the S3 backend. When its AccessKey or SecretKey is empty, New loads both with
	// LoadS3Credentials(S3AccessKeyFile, S3SecretKeyFile): secrets never come from flags.
	S3 S3Config
	// S3AccessKeyFile and S3SecretKeyFile name files holding the S3 credentials (mounted Secret).
	S3AccessKeyFile, S3SecretKeyFile string
	// GCS configures the GCS backend.
	GCS GCSConfig
}

// BindFlags registers the --store-* flags on flags, writing into c. Every flag's default is set
// on c as the flag package does, so call it before setting fields by hand.
func (c *Config) BindFlags(flags *flag.FlagSet) {
	flags.StringVar(&c.Backend, "store-backend", BackendFS,
		"Object store for archived jobs and logs: fs, s3 or gcs.")
	flags.DurationVar(&c.Timeouts.Call, "store-timeout", DefaultCallTimeout,
		"Timeout of each object store metadata call (stat, delete, ping).")
	flags.DurationVar(&c.Timeouts.Transfer, "store-transfer-timeout", DefaultTransferTimeout,
		"Timeout of each object upload, download or listing, and of each part of a compose.")

	flags.StringVar(&c.LockMode, "store-lock-mode", "",
		"Lock final objects until their retain-until date (see --retention): governance or compliance (S3 Object Lock modes; "+
			"GCS object retention Unlocked or Locked; the fs backend makes them read-only files). Empty locks nothing. "+
			"With s3 the bucket must have Object Lock enabled.")

	flags.StringVar(&c.FSRoot, "store-fs-root", "",
		"Root directory of the fs backend; created if missing.")

	flags.StringVar(&c.S3.Endpoint, "store-s3-endpoint", "",
		"S3 endpoint as host[:port], without scheme (e.g. s3.eu-west-1.amazonaws.com or minio.minio:9000).")
	flags.StringVar(&c.S3.Bucket, "store-s3-bucket", "",
		"S3 bucket; it must exist.")
	flags.StringVar(&c.S3.Region, "store-s3-region", "",
		"S3 region; empty asks the service for the bucket's location.")
	flags.BoolVar(&c.S3.Secure, "store-s3-tls", true,
		"Reach the S3 endpoint over HTTPS; --store-s3-tls=false for plain HTTP.")
	flags.BoolVar(&c.S3.PathStyle, "store-s3-path-style", false,
		"Address the bucket as endpoint/bucket, as MinIO and most self-hosted services need; otherwise chosen per endpoint.")
	flags.StringVar(&c.S3.CAFile, "store-s3-ca-file", "",
		"PEM file of CA certificates trusted for the S3 endpoint, in addition to the system roots.")
	flags.StringVar(&c.S3AccessKeyFile, "store-s3-access-key-file", "",
		"File holding the S3 access key; when empty, $AWS_ACCESS_KEY_ID or $MINIO_ACCESS_KEY.")
	flags.StringVar(&c.S3SecretKeyFile, "store-s3-secret-key-file", "",
		"File holding the S3 secret key; when empty, $AWS_SECRET_ACCESS_KEY or $MINIO_SECRET_KEY.")
	flags.Uint64Var(&c.S3.PartSize, "store-s3-part-size", DefaultPartSize,
		"S3 multipart upload part size in bytes, 5 MiB to 5 GiB; each upload in flight holds one part in memory.")

	flags.StringVar(&c.GCS.Bucket, "store-gcs-bucket", "",
		"GCS bucket; it must exist. Credentials are the application default credentials.")
	flags.IntVar(&c.GCS.ChunkSize, "store-gcs-chunk-size", DefaultChunkSize,
		"GCS resumable upload chunk size in bytes; each upload in flight holds one chunk in memory.")
}

// Validate reports every problem of the configuration at once, naming the flag to fix. For the S3
// backend it also checks that the CA file and the credentials can be read.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if c.Timeouts.Call < 0 {
		add("--store-timeout %s is negative", c.Timeouts.Call)
	}
	if c.Timeouts.Transfer < 0 {
		add("--store-transfer-timeout %s is negative", c.Timeouts.Transfer)
	}
	if err := validLockMode(c.LockMode); err != nil {
		add("--store-lock-mode: %w", err)
	}
	switch c.Backend {
	case "", BackendFS:
		if c.FSRoot == "" {
			add("--store-fs-root is required with --store-backend=fs")
		}
	case BackendS3:
		errs = append(errs, c.validateS3()...)
	case BackendGCS:
		if c.GCS.Bucket == "" {
			add("--store-gcs-bucket is required with --store-backend=gcs")
		}
		if c.GCS.ChunkSize < 0 {
			add("--store-gcs-chunk-size %d is negative", c.GCS.ChunkSize)
		}
	default:
		add("--store-backend %q is not one of %s, %s, %s", c.Backend, BackendFS, BackendS3, BackendGCS)
	}
	return errors.Join(errs...)
}

// validLockMode reports whether mode is a lock mode or empty.
func validLockMode(mode string) error {
	switch mode {
	case "", LockGovernance, LockCompliance:
		return nil
	}
	return fmt.Errorf("%q is not one of %s, %s (or empty for no lock)", mode, LockGovernance, LockCompliance)
}

func (c Config) validateS3() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch {
	case c.S3.Endpoint == "":
		add("--store-s3-endpoint is required with --store-backend=s3")
	case strings.Contains(c.S3.Endpoint, "/"):
		add("--store-s3-endpoint %q must be host[:port], without scheme or path (use --store-s3-tls to choose http or https)", c.S3.Endpoint)
	}
	if c.S3.Bucket == "" {
		add("--store-s3-bucket is required with --store-backend=s3")
	} else if err := s3utils.CheckValidBucketName(c.S3.Bucket); err != nil {
		add("--store-s3-bucket %q: %w", c.S3.Bucket, err)
	}
	if p := c.S3.PartSize; p != 0 && (p < MinPartSize || p > MaxPartSize) {
		add("--store-s3-part-size %d is outside [%d, %d] (5 MiB to 5 GiB)", p, MinPartSize, MaxPartSize)
	}
	if c.S3.CAFile != "" {
		if !c.S3.Secure {
			add("--store-s3-ca-file is set but --store-s3-tls is false")
		}
		if _, err := loadCertPool(c.S3.CAFile); err != nil {
			add("--store-s3-ca-file: %w", err)
		}
	}
	if c.S3.AccessKey == "" || c.S3.SecretKey == "" {
		if _, _, err := LoadS3Credentials(c.S3AccessKeyFile, c.S3SecretKeyFile); err != nil {
			add("S3 credentials (--store-s3-access-key-file, --store-s3-secret-key-file or environment): %w", err)
		}
	}
	return errs
}

// New validates c and returns the selected backend. It does not contact the service, but for an
// S3 store with a lock mode, whose bucket must have Object Lock enabled (checked within the Call
// timeout): a bucket that cannot lock objects would otherwise fail every locked write. Call Ping
// from a readiness check.
func New(ctx context.Context, c Config) (Store, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("create object store: %w", err)
	}
	switch c.Backend {
	case BackendS3:
		cfg := c.S3
		cfg.Timeouts = c.Timeouts
		cfg.LockMode = c.LockMode
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			var err error
			cfg.AccessKey, cfg.SecretKey, err = LoadS3Credentials(c.S3AccessKeyFile, c.S3SecretKeyFile)
			if err != nil {
				return nil, fmt.Errorf("create object store: %w", err)
			}
		}
		s, err := NewS3(cfg)
		if err != nil {
			return nil, err
		}
		if cfg.LockMode != "" {
			if err := s.CheckLock(ctx); err != nil {
				return nil, fmt.Errorf("create object store: --store-lock-mode %s: %w", cfg.LockMode, err)
			}
		}
		return s, nil
	case BackendGCS:
		cfg := c.GCS
		cfg.Timeouts = c.Timeouts
		cfg.LockMode = c.LockMode
		s, err := NewGCS(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		var opts []FSOption
		if c.LockMode != "" {
			opts = append(opts, WithReadOnlyLocks())
		}
		s, err := NewFS(c.FSRoot, opts...)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}
