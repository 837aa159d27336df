package db

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"
)

// querier runs queries on the pool (*sql.DB) or in a transaction (*sql.Tx).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Helpers between Go's "zero means unknown" and SQL NULL.

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullTime(t *time.Time) any {
	if t == nil || t.IsZero() {
		return nil
	}
	return t.UTC()
}

func nullTimeValue(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

// rawJSON passes JSON as text: lib/pq would send []byte as bytea.
func rawJSON(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// jsonMap encodes a string map as a JSON object; nil is the empty object.
func jsonMap(m map[string]string) (string, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// decodeMap is the inverse of jsonMap: the empty object decodes to nil.
func decodeMap(b []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// jsonbSafe splits JSON text (a string, or nil for NULL) into what its jsonb column takes and what
// its raw text column takes (migration 0012). jsonb refuses the escape \u0000 (U+0000): JSON text
// holding one goes whole into the raw column, and into the jsonb column with \ufffd in its place;
// any other goes into the jsonb column alone (raw NULL).
func jsonbSafe(v any) (jsonb, raw any) {
	s, ok := v.(string)
	if !ok || !hasNULEscape(s) {
		return v, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		// An escape: \u0000 is replaced, any other is copied whole (so that the backslash of
		// "\\u0000", an escaped backslash, is not taken for the start of one).
		if strings.HasPrefix(s[i:], `\u0000`) {
			b.WriteString(`\ufffd`)
			i += len(`\u0000`) - 1
			continue
		}
		b.WriteString(s[i:min(i+2, len(s))])
		i++
	}
	return b.String(), s
}

// hasNULEscape reports whether JSON text holds the escape \u0000 (JSON cannot hold U+0000 itself).
func hasNULEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			if strings.HasPrefix(s[i:], `\u0000`) {
				return true
			}
			i++ // skip the escaped character
		}
	}
	return false
}

// rawOr is the raw JSON text when it is set, else the jsonb column's.
func rawOr(raw sql.NullString, jsonb []byte) []byte {
	if raw.Valid {
		return []byte(raw.String)
	}
	return jsonb
}
