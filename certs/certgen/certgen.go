// Package certgen mints a private CA and serving certificates for the jobvault webhook, for
// development, tests and the self-managed deployment (config/selfsigned). Production clusters with
// cert-manager use config/certmanager instead.
//
// Keys are ECDSA P-256. Nothing here is ever written into the repository: callers choose the
// directory, and private keys are written with mode 0600.
package certgen

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Defaults for Options: the Service of config/webhook.
const (
	DefaultService       = "jobvault-webhook"
	DefaultNamespace     = "jobvault-system"
	DefaultClusterDomain = "cluster.local"
	DefaultValidity      = 365 * 24 * time.Hour
	DefaultCAValidity    = 10 * 365 * 24 * time.Hour
)

// File names written by WriteDir, as controller-runtime's webhook server and kubernetes.io/tls
// Secrets expect them.
const (
	CertFile   = "tls.crt"
	KeyFile    = "tls.key"
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Options describe a serving certificate. The zero value is the in-cluster Service of
// config/webhook plus localhost, 127.0.0.1 and ::1, valid for DefaultValidity.
type Options struct {
	Service       string
	Namespace     string
	ClusterDomain string
	// DNSNames and IPs are added to the defaults.
	DNSNames []string
	IPs      []net.IP
	Validity time.Duration
}

func (o Options) withDefaults() Options {
	if o.Service == "" {
		o.Service = DefaultService
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = DefaultClusterDomain
	}
	if o.Validity <= 0 {
		o.Validity = DefaultValidity
	}
	return o
}

// AllDNSNames lists the names the serving certificate is valid for: every form by which the API
// server or a pod reaches the Service, then localhost, then o.DNSNames.
func (o Options) AllDNSNames() []string {
	o = o.withDefaults()
	svc := o.Service + "." + o.Namespace
	names := []string{o.Service, svc, svc + ".svc", svc + ".svc." + o.ClusterDomain, "localhost"}
	return append(names, o.DNSNames...)
}

// AllIPs lists the IP addresses the serving certificate is valid for: loopback, then o.IPs.
func (o Options) AllIPs() []net.IP {
	return append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, o.IPs...)
}

// CA is a certificate authority that issues serving certificates.
type CA struct {
	// Cert is the parsed CA certificate; CertPEM the same in PEM.
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// NewCA creates a self-signed CA valid for validity (DefaultCAValidity if not positive).
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"jobvault"}},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	return newCA(der, key)
}

// LoadCA reads a CA from its PEM certificate and PEM private key (PKCS#8, EC or PKCS#1).
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("load CA: no CERTIFICATE PEM block in the certificate")
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	ca, err := newCA(block.Bytes, key)
	if err != nil {
		return nil, err
	}
	if !ca.Cert.IsCA {
		return nil, errors.New("load CA: the certificate is not a CA")
	}
	if !publicKeysEqual(ca.Cert.PublicKey, key.Public()) {
		return nil, errors.New("load CA: the key does not match the certificate")
	}
	return ca, nil
}

func newCA(der []byte, key crypto.Signer) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}, nil
}

// KeyPEM returns the CA's private key in PKCS#8 PEM, to keep the CA for later rotations.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Issue creates a new key and a serving certificate for it, signed by ca. Every call makes a new
// key and serial: issuing again under the same CA is a rotation that needs no caBundle change.
func (ca *CA) Issue(o Options) (*Bundle, error) {
	o = o.withDefaults()
	names := o.AllDNSNames()
	b, err := ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: names[2], Organization: []string{"jobvault"}}, // <svc>.<ns>.svc
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    names,
		IPAddresses: o.AllIPs(),
	}, o.Validity)
	if err != nil {
		return nil, fmt.Errorf("issue serving certificate: %w", err)
	}
	return b, nil
}

// IssueClient creates a new key and a client certificate for commonName, signed by ca, valid for
// validity (DefaultValidity if not positive): for instance the front-proxy client certificate
// with which kube-apiserver's aggregator presents requests to an aggregated API server
// (--proxy-client-cert-file, its CN one of --requestheader-allowed-names).
func (ca *CA) IssueClient(commonName string, validity time.Duration) (*Bundle, error) {
	if validity <= 0 {
		validity = DefaultValidity
	}
	b, err := ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, validity)
	if err != nil {
		return nil, fmt.Errorf("issue client certificate %s: %w", commonName, err)
	}
	return b, nil
}

// sign completes tmpl (serial, validity within the CA's, key usage), signs it with a new key and
// returns the PEM bundle.
func (ca *CA) sign(tmpl *x509.Certificate, validity time.Duration) (*Bundle, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(validity) // tolerate clock skew
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return &Bundle{
		CACert: ca.CertPEM,
		Cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Bundle is a serving certificate, its key and the CA that signed it, all PEM.
type Bundle struct {
	CACert []byte
	Cert   []byte
	Key    []byte
}

// Generate creates a new CA and a serving certificate from it.
func Generate(o Options) (*Bundle, error) {
	ca, err := NewCA("jobvault-webhook-ca", 0)
	if err != nil {
		return nil, err
	}
	return ca.Issue(o)
}

// CABundle returns the CA certificate as a MutatingWebhookConfiguration's caBundle wants it in
// YAML: base64 of the PEM.
func (b *Bundle) CABundle() string { return base64.StdEncoding.EncodeToString(b.CACert) }

// WriteDir writes tls.crt, tls.key and ca.crt into dir (created 0700 if missing), each file
// atomically (temporary file, then rename), so that a server watching the directory never reads
// a half-written file. The key is written before the certificate, so the last change a watcher
// sees leaves a matching pair; in between it may read the new key with the old certificate, reject
// the pair (controller-runtime's certwatcher logs it) and keep serving the old one.
func (b *Bundle) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create certificate directory: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{CACertFile, b.CACert, 0o644},
		{KeyFile, b.Key, 0o600},
		{CertFile, b.Cert, 0o644},
	} {
		if err := WriteFileAtomic(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileAtomic replaces path with data through a temporary file in the same directory.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return serial, nil
}

func parseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block in the key")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported key PEM block %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", key)
	}
	return signer, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}
