// Package export writes an audit view over a time range as CSV or JSON Lines, deterministically:
// the same rows give the same bytes, whoever runs it and wherever (values are formatted by the
// query, independently of the session; rows come in the order of a unique key; nothing in the
// output depends on the time of the export). Rows are streamed from the database to the writer,
// never held whole. The Meta of an export records its query, arguments, row count and the
// sha256 of its bytes, for an auditor to check with sha256sum and to reproduce.
package export

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/jobvault/jobvault/pkg/db"
)

// Format is the encoding of an export.
type Format string

// Formats.
const (
	// CSV: RFC 4180, a header line of column names, "\n" line ends. A field is quoted when it
	// holds a comma, a double quote (doubled), a CR or LF, or is the empty string; an unquoted
	// empty field is NULL (Postgres' COPY CSV convention).
	CSV Format = "csv"
	// JSONL: one JSON object per line, keys in the view's column order, NULL as null, numbers as
	// numbers, jsonb and arrays as JSON.
	JSONL Format = "jsonl"
)

// Formats lists the valid formats.
var Formats = []Format{CSV, JSONL}

// Source is the database side of an export (db.DB).
type Source interface {
	PlanAuditExport(ctx context.Context, e db.AuditExport) (db.ExportPlan, error)
	StreamAuditExport(ctx context.Context, plan db.ExportPlan, row func([]sql.NullString) error) error
}

// Meta describes an export: what was asked, the query that ran, and what it wrote.
type Meta struct {
	View      string            `json:"view"`
	Format    Format            `json:"format"`
	From      string            `json:"from"`
	To        string            `json:"to"`
	Namespace string            `json:"namespace"`
	Settings  []string          `json:"settings"`
	Query     string            `json:"query"`
	Args      []string          `json:"args"`
	Columns   []db.ExportColumn `json:"columns"`
	Rows      int64             `json:"rows"`
	Bytes     int64             `json:"bytes"`
	// SHA256 is the lower-case hex SHA-256 of the export's bytes.
	SHA256 string `json:"sha256"`
}

// Write streams the export e in format f to w and returns its Meta. On error, w may hold a
// partial export (callers writing files write them aside and rename on success).
func Write(ctx context.Context, src Source, e db.AuditExport, f Format, w io.Writer) (Meta, error) {
	enc, ok := encoders[f]
	if !ok {
		return Meta{}, fmt.Errorf("export: format %q is not csv or jsonl", f)
	}
	plan, err := src.PlanAuditExport(ctx, e)
	if err != nil {
		return Meta{}, err
	}
	meta := Meta{View: e.View, Format: f, Namespace: e.Namespace, Settings: plan.Settings, Query: plan.Query, Args: plan.Args, Columns: plan.Columns}
	meta.From, meta.To = plan.Args[0], plan.Args[1]
	sum := sha256.New()
	counted := &countingWriter{w: io.MultiWriter(w, sum)}
	out := bufio.NewWriterSize(counted, 64<<10)
	var line bytes.Buffer
	if f == CSV {
		for i, c := range plan.Columns {
			if i > 0 {
				line.WriteByte(',')
			}
			writeCSVField(&line, sql.NullString{String: c.Name, Valid: true})
		}
		line.WriteByte('\n')
		if _, err := out.Write(line.Bytes()); err != nil {
			return Meta{}, fmt.Errorf("export: write: %w", err)
		}
	}
	err = src.StreamAuditExport(ctx, plan, func(vals []sql.NullString) error {
		line.Reset()
		if err := enc(&line, plan.Columns, vals); err != nil {
			return fmt.Errorf("export: row %d: %w", meta.Rows+1, err)
		}
		if _, err := out.Write(line.Bytes()); err != nil {
			return fmt.Errorf("export: write: %w", err)
		}
		meta.Rows++
		return nil
	})
	if err != nil {
		return Meta{}, err
	}
	if err := out.Flush(); err != nil {
		return Meta{}, fmt.Errorf("export: write: %w", err)
	}
	meta.Bytes = counted.n
	meta.SHA256 = hex.EncodeToString(sum.Sum(nil))
	return meta, nil
}

// MarshalMeta encodes m as the indented JSON of a .meta.json file, ending in a newline.
func MarshalMeta(m Meta) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type encoder func(*bytes.Buffer, []db.ExportColumn, []sql.NullString) error

var encoders = map[Format]encoder{CSV: encodeCSV, JSONL: encodeJSONL}

func encodeCSV(b *bytes.Buffer, _ []db.ExportColumn, vals []sql.NullString) error {
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		writeCSVField(b, v)
	}
	b.WriteByte('\n')
	return nil
}

func writeCSVField(b *bytes.Buffer, v sql.NullString) {
	if !v.Valid {
		return
	}
	if v.String != "" && !strings.ContainsAny(v.String, ",\"\r\n") {
		b.WriteString(v.String)
		return
	}
	b.WriteByte('"')
	b.WriteString(strings.ReplaceAll(v.String, `"`, `""`))
	b.WriteByte('"')
}

func encodeJSONL(b *bytes.Buffer, cols []db.ExportColumn, vals []sql.NullString) error {
	b.WriteByte('{')
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(b, c.Name)
		b.WriteByte(':')
		v := vals[i]
		switch {
		case !v.Valid:
			b.WriteString("null")
		case c.Kind == db.KindNumber || c.Kind == db.KindBool:
			if !json.Valid([]byte(v.String)) {
				return fmt.Errorf("column %s: %q is not a JSON %s", c.Name, v.String, c.Kind)
			}
			b.WriteString(v.String)
		case c.Kind == db.KindJSON:
			if err := json.Compact(b, []byte(v.String)); err != nil {
				return fmt.Errorf("column %s: %w", c.Name, err)
			}
		default:
			writeJSONString(b, v.String)
		}
	}
	b.WriteString("}\n")
	return nil
}

// writeJSONString writes s as a JSON string, without Go's HTML escapes (<, >, & stay readable).
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}
