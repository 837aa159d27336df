package objstore

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestValidateKey(t *testing.T) {
	valid := []string{
		"a", "a/b", "ns/job/uid/pods/pod/uid/main.log.gz", "with space/ünïcødé 日本語.log",
		"..a/b..", "a/.hidden", "a\\b", strings.Repeat("k", 1024),
	}
	for _, key := range valid {
		if err := ValidateKey(key); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", key, err)
		}
	}
	invalid := map[string]string{
		"":                        "empty",
		strings.Repeat("k", 1025): "longer than 1024 bytes",
		"\xff":                    "not valid UTF-8",
		"a\x00b":                  "control character",
		"a\rb":                    "control character",
		"/a":                      "absolute",
		"a/":                      "ends with /",
		"a//b":                    "empty path element",
		".":                       `"." path element`,
		"a/./b":                   `"." path element`,
		"..":                      `".." path element`,
		"../a":                    `".." path element`,
		"a/../../b":               `".." path element`,
	}
	for key, reason := range invalid {
		err := ValidateKey(key)
		if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), reason) {
			t.Errorf("ValidateKey(%.40q) = %v, want ErrInvalidKey saying %q", key, err, reason)
		}
	}
}

// TestSourceHidesUnexpectedEOF: minio-go compares read errors with io.ErrUnexpectedEOF by value
// and takes it for a short last part; a broken source must not look like that.
func TestSourceHidesUnexpectedEOF(t *testing.T) {
	src := newSource(t.Context(), iotest.ErrReader(io.ErrUnexpectedEOF), nil)
	_, err := src.Read(make([]byte, 1))
	if err == io.ErrUnexpectedEOF || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Read error = %#v, want a wrapped io.ErrUnexpectedEOF", err)
	}
	if _, err := newSource(t.Context(), strings.NewReader(""), nil).Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("Read at end = %v, want io.EOF itself", err)
	}
}
