package stack

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/cli"
)

// AuditKeys writes a fresh ed25519 key pair for the audit chain's signed digests as PEM files
// (PKCS #8 and PKIX, as openssl writes them) in a temporary directory, and returns their paths.
// Keys are made per test: none is ever committed.
func AuditKeys(t testing.TB) (private, public string) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	private, public = filepath.Join(dir, "key.pem"), filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(private, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	WritePublicKey(t, public, pub)
	return private, public
}

// WritePublicKey writes pub to path as PEM PKIX, as openssl writes it and as --audit-public-key
// reads it.
func WritePublicKey(t testing.TB, path string, pub ed25519.PublicKey) {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// AuditVerify runs `archiver audit verify` against the rig's database and store, with the
// archiver's flags, and fails the test unless it finds nothing.
func (s *Rig) AuditVerify(t *testing.T) {
	t.Helper()
	var args []string
	for _, a := range s.Archiver.Args {
		if strings.HasPrefix(a, "--store-") || strings.HasPrefix(a, "--db-dsn=") || strings.HasPrefix(a, "--cluster-name=") {
			args = append(args, a)
		}
	}
	for _, e := range s.Archiver.Environ {
		if k, v, _ := strings.Cut(e, "="); !strings.HasPrefix(k, "JOBVAULT_TEST_") {
			t.Setenv(k, v)
		}
	}
	var out, errOut bytes.Buffer
	if code := cli.Main(t.Context(), append([]string{"audit", "verify"}, args...), &out, &errOut); code != cli.ExitOK {
		t.Errorf("audit verify: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
}

// ReportText is a verify report (verify.Report, verify.JobReport) as its command prints it, for a
// failure's message.
func ReportText(t testing.TB, rep interface{ WriteText(io.Writer) error }) string {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
