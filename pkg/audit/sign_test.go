package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

func TestLoadKeysEveryFormat(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	pubDER, _ := x509.MarshalPKIXPublicKey(pub)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	privates := map[string][]byte{
		"pem":  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"seed": key.Seed(),
		"hex":  []byte(hex.EncodeToString(key.Seed()) + "\n"),
	}
	publics := map[string][]byte{
		"pem": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		"raw": pub,
		"hex": []byte(hex.EncodeToString(pub)),
	}
	doc := Sign(Digest{Version: DigestVersion, Cluster: "c", Seq: 3, HeadSHA256: strings.Repeat("a", 64), At: "2026-11-22T10:00:00Z"}, key)
	for name, b := range privates {
		k, err := LoadSigningKey(write("key-"+name, b))
		if err != nil || !k.Equal(key) {
			t.Errorf("LoadSigningKey(%s) = %v, want the key", name, err)
		}
	}
	for name, b := range publics {
		p, err := LoadPublicKey(write("pub-"+name, b))
		if err != nil || !p.Equal(pub) {
			t.Errorf("LoadPublicKey(%s) = %v, want the key", name, err)
			continue
		}
		if d, err := Open(doc, p); err != nil || d.Seq != 3 || d.KeyID != KeyID(pub) {
			t.Errorf("Open with the %s key: %+v, %v", name, d, err)
		}
	}
	if _, err := LoadSigningKey(write("bad", []byte("not a key"))); err == nil {
		t.Error("LoadSigningKey accepted garbage")
	}
	// A changed field, or another key, fails the signature.
	forged := strings.Replace(string(doc), `"seq": 3`, `"seq": 4`, 1)
	if _, err := Open([]byte(forged), pub); err == nil {
		t.Error("Open accepted a document whose seq was changed")
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := Open(doc, other); err == nil {
		t.Error("Open accepted a document with another key")
	}
}

func TestRecordDigestStableAndSensitive(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)
	rec := func() Record {
		return Record{
			Job:         record.Job{UID: "j", Namespace: "ns", Name: "n", CreatedAt: at, Phase: "Completed", Spec: []byte(`{"a": 1}`)},
			Transitions: []record.Transition{{Phase: "Running", Time: at, Source: record.SourceCondition}},
			Pods:        []record.Pod{{UID: "p", JobUID: "j", Name: "n-0", CreatedAt: at}},
			Logs:        []record.LogObject{{PodUID: "p", Container: "main", Instance: "current", Bytes: 10, SHA256: "s", State: record.LogStored}},
			Gaps:        []record.Gap{{PodUID: "p", Container: "main", After: at, Reason: record.GapRotated}},
		}
	}
	d1, rows := RecordDigest(rec())
	if d2, _ := RecordDigest(rec()); d1 != d2 || len(rows) != 5 || DigestRows(rows) != d1 {
		t.Fatalf("digest not stable: %s %s, %d rows", d1, d2, len(rows))
	}
	// Microseconds are what the database keeps: a time read back from it digests the same.
	r := rec()
	r.Job.CreatedAt = at.Round(time.Microsecond)
	if d, _ := RecordDigest(r); d != d1 {
		t.Error("a time at the database's precision digests differently")
	}
	for name, change := range map[string]func(*Record){
		"phase":      func(r *Record) { r.Job.Phase = "Failed" },
		"transition": func(r *Record) { r.Transitions[0].Reason = "x" },
		"pod":        func(r *Record) { r.Pods[0].Node = "x" },
		"log":        func(r *Record) { r.Logs[0].Bytes++ },
		"gap":        func(r *Record) { r.Gaps[0].After = r.Gaps[0].After.Add(time.Nanosecond) },
		"no pod":     func(r *Record) { r.Pods = nil },
	} {
		r := rec()
		change(&r)
		if d, _ := RecordDigest(r); d == d1 {
			t.Errorf("changing the %s leaves the digest as it was", name)
		}
	}
}
