package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	auditexport "github.com/jobvault/jobvault/pkg/audit/export"
	"github.com/jobvault/jobvault/pkg/db"
)

// exportCmd holds the flags of `archiver audit export`.
type exportCmd struct {
	src                 *sources
	from, to, namespace string
	view, format, out   string
	timeout             time.Duration
	fromTime, toTime    time.Time
}

func bindExport(fs *flag.FlagSet, src *sources) runner {
	c := &exportCmd{src: src}
	fs.StringVar(&c.from, "from", "", "Start of the time range (inclusive) on the jobs' creation time: RFC 3339 or YYYY-MM-DD (UTC). Required.")
	fs.StringVar(&c.to, "to", "", "End of the time range (exclusive): RFC 3339 or YYYY-MM-DD (UTC). Required.")
	fs.StringVar(&c.namespace, "namespace", "", "Export only the jobs of this namespace.")
	fs.StringVar(&c.view, "view", "audit_outcomes", "Audit view to export: one of "+strings.Join(db.AuditViews(), ", ")+".")
	fs.StringVar(&c.format, "format", string(auditexport.CSV), "Output format: csv or jsonl.")
	fs.StringVar(&c.out, "out", "", "Write the export to this file, with FILE.sha256 and FILE.meta.json beside it; stdout if empty.")
	fs.DurationVar(&c.timeout, "timeout", time.Hour, "Bound of the whole export (the query streams for as long as it has rows).")
	return c
}

// parseTime reads RFC 3339 or a bare date (midnight UTC).
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-10-01T00:00:00Z) nor a date (2026-10-01)", s)
}

// validate reports every problem with the command line at once.
func (c *exportCmd) validate() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, b := range []struct {
		flag, value string
		into        *time.Time
	}{{"from", c.from, &c.fromTime}, {"to", c.to, &c.toTime}} {
		var err error
		switch {
		case b.value == "":
			add("--%s is required", b.flag)
		default:
			if *b.into, err = parseTime(b.value); err != nil {
				add("--%s: %v", b.flag, err)
			}
		}
	}
	if !c.fromTime.IsZero() && !c.toTime.IsZero() && !c.fromTime.Before(c.toTime) {
		add("--from %s is not before --to %s", c.from, c.to)
	}
	if !slices.Contains(db.AuditViews(), c.view) {
		add("--view %q is not one of %s", c.view, strings.Join(db.AuditViews(), ", "))
	}
	if !slices.Contains(auditexport.Formats, auditexport.Format(c.format)) {
		add("--format %q is not csv or jsonl", c.format)
	}
	if c.timeout <= 0 {
		add("--timeout %s must be positive", c.timeout)
	}
	if c.out != "" {
		if st, err := os.Stat(filepath.Dir(c.out)); err != nil || !st.IsDir() {
			add("--out %s: directory %s does not exist", c.out, filepath.Dir(c.out))
		}
	}
	return append(errs, c.src.validate(true, false)...)
}

func (c *exportCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	records, err := c.src.openDB(ctx, 2) // one query streams
	if err != nil {
		return err
	}
	defer records.Close()
	req := db.AuditExport{View: c.view, From: c.fromTime, To: c.toTime, Namespace: c.namespace}
	if c.out == "" {
		meta, err := auditexport.Write(ctx, records, req, auditexport.Format(c.format), stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "archiver audit export: %s: %d rows, %d bytes, sha256 %s\n", c.view, meta.Rows, meta.Bytes, meta.SHA256)
		return nil
	}
	return c.writeFiles(ctx, records, req, stderr)
}

// writeFiles writes the export and its sidecars aside, then renames them into place: a failed
// export leaves no file, and never a checksum of something else.
func (c *exportCmd) writeFiles(ctx context.Context, records *db.DB, req db.AuditExport, stderr io.Writer) (err error) {
	dir, base := filepath.Dir(c.out), filepath.Base(c.out)
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	meta, err := auditexport.Write(ctx, records, req, auditexport.Format(c.format), tmp)
	if err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	metaJSON, err := auditexport.MarshalMeta(meta)
	if err != nil {
		return err
	}
	sidecars := map[string][]byte{
		c.out + ".sha256":    fmt.Appendf(nil, "%s  %s\n", meta.SHA256, base),
		c.out + ".meta.json": metaJSON,
	}
	for _, name := range []string{c.out + ".sha256", c.out + ".meta.json"} {
		if err := writeFileAtomic(name, sidecars[name]); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), c.out); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "archiver audit export: %s: %d rows, %d bytes, sha256 %s, written to %s (+ .sha256, .meta.json)\n",
		c.view, meta.Rows, meta.Bytes, meta.SHA256, c.out)
	return nil
}

func writeFileAtomic(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
