package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// DigestVersion is the version of the signed digest format.
const DigestVersion = 1

// DefaultDigestPeriod is how often the chain head is signed unless told otherwise.
const DefaultDigestPeriod = time.Hour

// Digest is what is signed: a cluster's chain head at a time, chained to the previous digest.
type Digest struct {
	Version int    `json:"version"`
	Cluster string `json:"cluster"`
	// Seq and HeadSHA256 are the head's sequence number and manifest sha256 (0 and "" while the
	// chain is empty).
	Seq        int64  `json:"seq"`
	HeadSHA256 string `json:"headSHA256"`
	// At is when the head was read, RFC 3339 with nanoseconds, UTC.
	At string `json:"at"`
	// PreviousDigestSHA256 is the sha256 of the previous signed document, "" for the first.
	PreviousDigestSHA256 string `json:"previousDigestSHA256"`
	// KeyID names the signing key: the first 16 hex digits of the sha256 of its public key.
	KeyID string `json:"keyID"`
}

// SignedDocument is the stored form: the digest and the ed25519 signature (base64) of the
// digest's compact JSON encoding (json.Marshal of Digest, fields in this order).
type SignedDocument struct {
	Digest
	Signature string `json:"signature"`
}

func (d Digest) payload() []byte {
	b, _ := json.Marshal(d) // strings and numbers only
	return b
}

// KeyID names a public key in digests.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Sign returns the signed document of d, with d.KeyID set from key.
func Sign(d Digest, key ed25519.PrivateKey) []byte {
	d.KeyID = KeyID(key.Public().(ed25519.PublicKey))
	doc, _ := json.MarshalIndent(SignedDocument{Digest: d, Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, d.payload()))}, "", "  ")
	return doc
}

// Open parses a signed document and checks its signature with pub.
func Open(doc []byte, pub ed25519.PublicKey) (Digest, error) {
	var sd SignedDocument
	if err := json.Unmarshal(doc, &sd); err != nil {
		return Digest{}, fmt.Errorf("not a signed digest: %w", err)
	}
	sig, err := base64.StdEncoding.DecodeString(sd.Signature)
	if err != nil {
		return sd.Digest, fmt.Errorf("signature is not base64: %w", err)
	}
	if !ed25519.Verify(pub, sd.Digest.payload(), sig) {
		return sd.Digest, fmt.Errorf("signature does not verify with key %s (document names key %q)", KeyID(pub), sd.KeyID)
	}
	return sd.Digest, nil
}

// DigestKey is the object key of the signed digest of cluster's head at time at.
func DigestKey(prefix, cluster string, at time.Time) string {
	return path.Join(DigestDir(prefix, cluster), at.UTC().Format("20060102T150405.000000Z")+".json")
}

// DigestDir is the key prefix of a cluster's signed digests, without a trailing slash.
func DigestDir(prefix, cluster string) string {
	if cluster == "" {
		cluster = "_unnamed" // the default, empty --cluster-name
	}
	return path.Join(strings.Trim(prefix, "/"), "_audit", "digests", cluster)
}

// LoadSigningKey reads an ed25519 private key from a file: PEM (PKCS #8, "PRIVATE KEY", as
// `openssl genpkey -algorithm ed25519` writes), a raw 32-byte seed, or that seed in hex.
func LoadSigningKey(file string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	if block, _ := pem.Decode(b); block != nil {
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("signing key %s: %w", file, err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("signing key %s: a %T, not an ed25519 key", file, k)
		}
		return ek, nil
	}
	seed, err := rawKey(b)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", file, err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// LoadPublicKey reads an ed25519 public key from a file: PEM (PKIX, "PUBLIC KEY", as `openssl
// pkey -pubout` writes), 32 raw bytes, or those in hex.
func LoadPublicKey(file string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read public key: %w", err)
	}
	if block, _ := pem.Decode(b); block != nil {
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key %s: %w", file, err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("public key %s: a %T, not an ed25519 key", file, k)
		}
		return ek, nil
	}
	raw, err := rawKey(b)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", file, err)
	}
	return ed25519.PublicKey(raw), nil
}

func rawKey(b []byte) ([]byte, error) {
	if len(b) == 32 {
		return b, nil
	}
	if h, err := hex.DecodeString(string(bytes.TrimSpace(b))); err == nil && len(h) == 32 {
		return h, nil
	}
	return nil, fmt.Errorf("neither PEM, 32 raw bytes nor 64 hex digits (%d bytes)", len(b))
}

// SignerRecords is what the Signer needs of the database (implemented by *db.DB).
type SignerRecords interface {
	ChainHead(ctx context.Context, cluster string) (record.ChainHead, error)
	SignedDigests(ctx context.Context, cluster string) ([]record.SignedDigest, error)
	PutSignedDigest(ctx context.Context, s record.SignedDigest) error
}

// Signer signs the chain head of its cluster and stores the signed document in the database and
// the bucket. Its Pass runs periodically on the leader (a periodic.Runnable): one signer per
// cluster.
type Signer struct {
	Records SignerRecords
	Store   objstore.Store
	// Prefix is the archive's key prefix (--store-prefix).
	Prefix  string
	Cluster string
	Key     ed25519.PrivateKey
	Clock   clock.PassiveClock
}

// Pass is the signer's periodic task: one SignOnce. A failure is retried at the next period:
// the chain itself does not depend on it.
func (s *Signer) Pass(ctx context.Context) error {
	d, err := s.SignOnce(ctx)
	if err != nil {
		return fmt.Errorf("sign the audit chain head: %w", err)
	}
	logr.FromContextOrDiscard(ctx).Info("Signed the audit chain head", "seq", d.Seq, "key", d.ObjectKey)
	return nil
}

// SignOnce signs the head as it is now. It first stores the previous document in the bucket again
// if it is missing there (a crash between the database and the bucket), so that no digest recorded
// in the database is missing from the bucket.
func (s *Signer) SignOnce(ctx context.Context) (record.SignedDigest, error) {
	all, err := s.Records.SignedDigests(ctx, s.Cluster)
	if err != nil {
		return record.SignedDigest{}, err
	}
	var last record.SignedDigest
	if len(all) > 0 {
		last = all[len(all)-1]
		if _, err := s.Store.Stat(ctx, last.ObjectKey); errors.Is(err, objstore.ErrNotFound) {
			if err := s.Store.Put(ctx, last.ObjectKey, bytes.NewReader(last.Document), objstore.PutOptions{ContentType: "application/json"}); err != nil {
				return record.SignedDigest{}, fmt.Errorf("store signed digest %s: %w", last.ObjectKey, err)
			}
		} else if err != nil {
			return record.SignedDigest{}, fmt.Errorf("check signed digest %s: %w", last.ObjectKey, err)
		}
	}
	head, err := s.Records.ChainHead(ctx, s.Cluster)
	if err != nil {
		return record.SignedDigest{}, err
	}
	at := s.Clock.Now().UTC().Truncate(time.Microsecond) // the database's precision: at is a key
	if !at.After(last.At) {
		at = last.At.Add(time.Microsecond)
	}
	doc := Sign(Digest{Version: DigestVersion, Cluster: s.Cluster, Seq: head.Seq, HeadSHA256: head.ManifestSHA256,
		At: at.Format(time.RFC3339Nano), PreviousDigestSHA256: last.DigestSHA256}, s.Key)
	sum := sha256.Sum256(doc)
	sd := record.SignedDigest{Cluster: s.Cluster, At: at, Seq: head.Seq, HeadSHA256: head.ManifestSHA256, PrevDigest: last.DigestSHA256,
		DigestSHA256: hex.EncodeToString(sum[:]), ObjectKey: DigestKey(s.Prefix, s.Cluster, at), Document: doc}
	if err := s.Records.PutSignedDigest(ctx, sd); err != nil {
		return record.SignedDigest{}, err
	}
	if err := s.Store.Put(ctx, sd.ObjectKey, bytes.NewReader(doc), objstore.PutOptions{ContentType: "application/json"}); err != nil {
		return record.SignedDigest{}, fmt.Errorf("store signed digest %s: %w", sd.ObjectKey, err)
	}
	return sd, nil
}
