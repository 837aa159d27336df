package certgen

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		t.Fatalf("no PEM block in %q", pemBytes)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestGenerateVerifiesForEveryName(t *testing.T) {
	b, err := Generate(Options{DNSNames: []string{"webhook.example.test"}, IPs: []net.IP{net.ParseIP("10.0.0.7")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(b.Cert, b.Key); err != nil {
		t.Fatalf("certificate and key do not pair: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(b.CACert) {
		t.Fatal("CA PEM not accepted")
	}
	cert := parseCert(t, b.Cert)
	wantNames := []string{
		"jobvault-webhook", "jobvault-webhook.jobvault-system", "jobvault-webhook.jobvault-system.svc",
		"jobvault-webhook.jobvault-system.svc.cluster.local", "localhost", "webhook.example.test",
	}
	if diff := cmp.Diff(wantNames, cert.DNSNames); diff != "" {
		t.Errorf("DNS names (-want +got):\n%s", diff)
	}
	for _, name := range append(wantNames, "127.0.0.1", "::1", "10.0.0.7") {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "other.jobvault-system.svc", Roots: roots}); err == nil {
		t.Error("certificate verifies for a name it was not issued for")
	}
	if got := cert.NotAfter.Sub(cert.NotBefore); got < DefaultValidity || got > DefaultValidity+2*time.Hour {
		t.Errorf("validity %v, want about %v", got, DefaultValidity)
	}
	caBundle, err := base64.StdEncoding.DecodeString(b.CABundle())
	if err != nil || string(caBundle) != string(b.CACert) {
		t.Errorf("CABundle does not decode to the CA PEM (%v)", err)
	}
}

func TestOptionsService(t *testing.T) {
	o := Options{Service: "hook", Namespace: "ns", ClusterDomain: "corp.local"}
	want := []string{"hook", "hook.ns", "hook.ns.svc", "hook.ns.svc.corp.local", "localhost"}
	if diff := cmp.Diff(want, o.AllDNSNames()); diff != "" {
		t.Errorf("AllDNSNames (-want +got):\n%s", diff)
	}
}

// Issuing again under the same CA rotates key and serial; the old CA still verifies it, so the
// caBundle does not change. LoadCA restores a CA from its PEM files.
func TestIssueRotatesUnderTheSameCA(t *testing.T) {
	ca, err := NewCA("test-ca", time.Hour*24)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(ca.CertPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	first, err := ca.Issue(Options{})
	if err != nil {
		t.Fatal(err)
	}
	second, err := loaded.Issue(Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := parseCert(t, first.Cert), parseCert(t, second.Cert)
	if a.SerialNumber.Cmp(b.SerialNumber) == 0 || string(first.Key) == string(second.Key) {
		t.Error("second issue reused the serial or the key")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	if _, err := b.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: roots}); err != nil {
		t.Errorf("rotated certificate does not verify with the original CA: %v", err)
	}
	// A serving certificate never outlives its CA.
	if b.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("serving certificate ends %v after its CA %v", b.NotAfter, ca.Cert.NotAfter)
	}
}

func TestLoadCARejects(t *testing.T) {
	ca, err := NewCA("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("b", 0)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := other.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ cert, key []byte }{
		"mismatched key":  {ca.CertPEM, otherKey},
		"not a CA":        {leaf.Cert, leaf.Key},
		"no certificate":  {[]byte("nope"), otherKey},
		"no key":          {ca.CertPEM, []byte("nope")},
		"unsupported key": {ca.CertPEM, pem.EncodeToMemory(&pem.Block{Type: "DSA PRIVATE KEY", Bytes: []byte{1}})},
	} {
		if _, err := LoadCA(tc.cert, tc.key); err == nil {
			t.Errorf("%s: LoadCA succeeded, want an error", name)
		}
	}
}

func TestWriteDir(t *testing.T) {
	b, err := Generate(Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "certs")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		data []byte
		mode os.FileMode
	}{
		CertFile:   {b.Cert, 0o644},
		KeyFile:    {b.Key, 0o600},
		CACertFile: {b.CACert, 0o644},
	} {
		path := filepath.Join(dir, name)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want.data) {
			t.Errorf("%s content differs", name)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != want.mode {
			t.Errorf("%s mode %v, want %v", name, info.Mode().Perm(), want.mode)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Errorf("directory holds %d entries, want 3 (no temporary files left)", len(entries))
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)); err != nil {
		t.Errorf("written pair does not load: %v", err)
	}
}

func TestIssueClientVerifiesForClientAuthOnly(t *testing.T) {
	ca, err := NewCA("test-front-proxy-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.IssueClient("front-proxy-client", 0)
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCert(t, b.Cert)
	if cert.Subject.CommonName != "front-proxy-client" {
		t.Errorf("CN = %q, want front-proxy-client", cert.Subject.CommonName)
	}
	if cert.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("valid until %s, after its CA (%s)", cert.NotAfter, ca.Cert.NotAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify for client auth: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verifies for server auth")
	}
}
