package objstore

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalidKey is returned (wrapped) by every method given a key that no backend may store.
var ErrInvalidKey = errors.New("invalid object key")

// maxKeyLen is the limit of S3 and GCS (bytes of UTF-8); the filesystem backend applies it too so
// that a key accepted by one backend is accepted by all.
const maxKeyLen = 1024

// ValidateKey reports whether key can be stored by every backend: non-empty, valid UTF-8, at most
// 1024 bytes, no control characters, relative ("a/b", not "/a/b"), and made of non-empty path
// elements other than "." and "..". The rules are the same for all backends on purpose, so that
// the filesystem backend used in tests rejects exactly what S3 and GCS deployments would.
func ValidateKey(key string) error {
	var reason string
	switch {
	case key == "":
		reason = "empty"
	case len(key) > maxKeyLen:
		reason = fmt.Sprintf("longer than %d bytes", maxKeyLen)
	case !utf8.ValidString(key):
		reason = "not valid UTF-8"
	case strings.IndexFunc(key, isControl) >= 0:
		// GCS forbids CR and LF in names, and NUL cannot be a file name.
		reason = "contains a control character"
	case strings.HasPrefix(key, "/"):
		reason = "absolute (starts with /)"
	case strings.HasSuffix(key, "/"):
		reason = "ends with /"
	default:
		for elem := range strings.SplitSeq(key, "/") {
			switch elem {
			case "":
				reason = "contains an empty path element (//)"
			case ".", "..":
				reason = fmt.Sprintf("contains a %q path element", elem)
			}
			if reason != "" {
				break
			}
		}
	}
	if reason != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, reason)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
