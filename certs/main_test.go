package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/certs/certgen"
)

func TestRunWritesCertsAndPrintsCABundle(t *testing.T) {
	dir := t.TempDir()
	out, env := filepath.Join(dir, "out"), filepath.Join(dir, "ca-bundle.env")
	var stdout, stderr bytes.Buffer
	if err := run([]string{"--out", out, "--ca-bundle-env", env, "--dns-name", "a.test,b.test", "--ip", "10.1.2.3"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	caPEM, err := os.ReadFile(filepath.Join(out, certgen.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	printed := strings.TrimSpace(stdout.String())
	if decoded, err := base64.StdEncoding.DecodeString(printed); err != nil || string(decoded) != string(caPEM) {
		t.Errorf("stdout %q is not base64 of ca.crt (%v)", printed, err)
	}
	envData, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}
	if want := "caBundle=" + printed + "\n"; string(envData) != want {
		t.Errorf("ca-bundle.env = %q, want %q", envData, want)
	}
	for _, f := range []string{certgen.CertFile, certgen.KeyFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stderr.String(), "a.test") || !strings.Contains(stderr.String(), "10.1.2.3") {
		t.Errorf("summary %q lacks the extra names", stderr.String())
	}
}

// With --ca-dir, the first run creates the CA and later runs reuse it: same caBundle.
func TestRunReusesCADir(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	var first, second, stderr bytes.Buffer
	if err := run([]string{"--out", filepath.Join(dir, "1"), "--ca-dir", caDir}, &first, &stderr); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"--out", filepath.Join(dir, "2"), "--ca-dir", caDir}, &second, &stderr); err != nil {
		t.Fatal(err)
	}
	if first.String() != second.String() {
		t.Error("second run with the same --ca-dir printed another caBundle")
	}
	info, err := os.Stat(filepath.Join(caDir, certgen.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v, want 0600", info.Mode().Perm())
	}
	c1, _ := os.ReadFile(filepath.Join(dir, "1", certgen.CertFile))
	c2, _ := os.ReadFile(filepath.Join(dir, "2", certgen.CertFile))
	if string(c1) == string(c2) {
		t.Error("second run reused the serving certificate")
	}
}

func TestRunReportsEveryProblem(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run([]string{"--validity", "-1h", "--ip", "nope", "extra"}, &stdout, &stderr)
	if err == nil {
		t.Fatal("run succeeded, want an error")
	}
	for _, want := range []string{"--out is required", "--validity must be positive", `--ip "nope"`, "unexpected arguments"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout = %q, want nothing on error", stdout.String())
	}
}

func TestRunRejectsHalfACADir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, certgen.CACertFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run([]string{"--out", filepath.Join(dir, "out"), "--ca-dir", dir}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("run = %v, want an error about needing both CA files", err)
	}
}
