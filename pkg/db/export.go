package db

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lib/pq"
)

// auditView is how one audit view is exported: the column that selects the time range, the one
// that selects the namespace, and the order of its rows. The order ends in a unique key (or in
// every column), so an export of the same rows is the same bytes.
type auditView struct {
	time, namespace string
	order           []string
}

// auditViews are the views ExportAudit streams. Each time range is on the creation time of the
// jobs: an export of [from, to) holds the jobs created then, and their pods' logs and gaps.
var auditViews = map[string]auditView{
	"audit_submissions": {time: "created_at", namespace: "namespace", order: []string{"created_at", "uid"}},
	"audit_outcomes":    {time: "created_at", namespace: "namespace", order: []string{"created_at", "uid"}},
	"audit_retries":     {time: "created_at", namespace: "namespace", order: []string{"created_at", "uid"}},
	"audit_log_objects": {time: "job_created_at", namespace: "job_namespace",
		order: []string{"job_created_at", "job_uid", "pod_uid", "container", "instance"}},
	"audit_log_gaps": {time: "job_created_at", namespace: "job_namespace",
		order: []string{"job_created_at", "job_uid", "pod_uid", "container", "run", "missing_after", "missing_before", "reason", "detail", "recorded_at"}},
	"audit_log_sources": {time: "job_created_at", namespace: "job_namespace",
		order: []string{"job_created_at", "job_uid", "pod_uid", "container", "run", "from_bytes"}},
}

// AuditViews lists the views ExportAudit can stream, sorted.
func AuditViews() []string {
	names := make([]string, 0, len(auditViews))
	for n := range auditViews {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ColumnKind is how an exported value is to be read: every value arrives as text, formatted by
// the query itself so that it never depends on the session (time zone, DateStyle, IntervalStyle).
type ColumnKind string

// Kinds of ColumnKind.
const (
	// KindString: text, and times as RFC 3339 in UTC with microseconds (2026-11-22T09:30:00.000000Z).
	KindString ColumnKind = "string"
	// KindNumber: integers, and durations as seconds with microseconds (600.000000).
	KindNumber ColumnKind = "number"
	// KindBool: true or false.
	KindBool ColumnKind = "bool"
	// KindJSON: a JSON document (jsonb, and arrays as JSON arrays).
	KindJSON ColumnKind = "json"
)

// ExportColumn is one column of an export.
type ExportColumn struct {
	Name string `json:"name"`
	// Type is the column's Postgres type.
	Type string     `json:"type"`
	Kind ColumnKind `json:"kind"`
}

// AuditExport selects what ExportAudit streams: the rows of View for the jobs created in
// [From, To), of one namespace when Namespace is set.
type AuditExport struct {
	View      string
	From, To  time.Time
	Namespace string
}

// ExportPlan is the query of an export, as it will run: recorded beside the export so that an
// auditor can read and re-run it.
type ExportPlan struct {
	// Settings are run first, in the export's read-only transaction: values that Postgres prints
	// by the session's settings (a timestamptz inside a view's jsonb, say) print the same for
	// everyone.
	Settings []string
	Query    string
	Args     []string
	Columns  []ExportColumn
}

// PlanAuditExport builds the query of an export from the view's columns as the database has them.
// ErrInvalid for an unknown view or an empty or inverted time range.
func (d *DB) PlanAuditExport(ctx context.Context, e AuditExport) (ExportPlan, error) {
	v, ok := auditViews[e.View]
	var problems []string
	if !ok {
		problems = append(problems, fmt.Sprintf("view %q is not one of %s", e.View, strings.Join(AuditViews(), ", ")))
	}
	if e.From.IsZero() || e.To.IsZero() || !e.From.Before(e.To) {
		problems = append(problems, fmt.Sprintf("time range [%s, %s) is empty", e.From.Format(time.RFC3339Nano), e.To.Format(time.RFC3339Nano)))
	}
	if err := invalid("audit export", problems); err != nil {
		return ExportPlan{}, err
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `
SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory::text, t.typname
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, e.View)
	if err != nil {
		return ExportPlan{}, fmt.Errorf("read columns of %s: %w", e.View, translate(err))
	}
	defer rows.Close()
	var (
		plan  ExportPlan
		exprs []string
	)
	for rows.Next() {
		var name, typ, category, typname string
		if err := rows.Scan(&name, &typ, &category, &typname); err != nil {
			return ExportPlan{}, fmt.Errorf("read columns of %s: %w", e.View, translate(err))
		}
		expr, kind := exportExpr(pq.QuoteIdentifier(name), category, typname)
		plan.Columns = append(plan.Columns, ExportColumn{Name: name, Type: typ, Kind: kind})
		exprs = append(exprs, expr+" AS "+pq.QuoteIdentifier(name))
	}
	if err := rows.Err(); err != nil {
		return ExportPlan{}, fmt.Errorf("read columns of %s: %w", e.View, translate(err))
	}
	if len(plan.Columns) == 0 {
		return ExportPlan{}, fmt.Errorf("export %s: %w: the view does not exist (is the schema migrated?)", e.View, ErrNotFound)
	}
	order := make([]string, len(v.order))
	for i, c := range v.order {
		order[i] = pq.QuoteIdentifier(c)
	}
	plan.Settings = exportSettings
	plan.Query = fmt.Sprintf("SELECT %s\nFROM %s\nWHERE %s >= $1 AND %s < $2", strings.Join(exprs, ",\n       "), e.View, v.time, v.time)
	plan.Args = []string{formatTime(e.From), formatTime(e.To)}
	if e.Namespace != "" {
		plan.Query += fmt.Sprintf(" AND %s = $3", v.namespace)
		plan.Args = append(plan.Args, e.Namespace)
	}
	plan.Query += "\nORDER BY " + strings.Join(order, ", ")
	return plan, nil
}

// exportExpr is the SQL that formats a column of a Postgres type category as session-independent
// text, and the kind of value that text is.
func exportExpr(col, category, typname string) (string, ColumnKind) {
	switch {
	case typname == "timestamptz" || typname == "timestamp":
		return fmt.Sprintf(`to_char(%s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`, col), KindString
	case typname == "interval":
		return fmt.Sprintf(`to_char(extract(epoch FROM %s), 'FM999999999990.000000')`, col), KindNumber
	case typname == "jsonb" || typname == "json":
		return fmt.Sprintf(`(%s)::jsonb::text`, col), KindJSON
	case category == "A": // arrays
		return fmt.Sprintf(`to_jsonb(%s)::text`, col), KindJSON
	case category == "N":
		return col + "::text", KindNumber
	case category == "B":
		return col + "::text", KindBool
	default:
		return col + "::text", KindString
	}
}

// exportSettings fix every session setting that changes how a value prints.
var exportSettings = []string{
	"SET LOCAL TimeZone = 'UTC'",
	"SET LOCAL DateStyle = 'ISO, YMD'",
	"SET LOCAL IntervalStyle = 'postgres'",
	"SET LOCAL extra_float_digits = 1",
	"SET LOCAL bytea_output = 'hex'",
}

// formatTime is the form of times in export arguments: RFC 3339, UTC, nanoseconds as needed.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// StreamAuditExport runs plan and calls row for each row, in order, as the database sends it
// (nothing is buffered): one value per column, NULL as !Valid. The slice is reused between calls.
// It is bounded by ctx only, not by Options.Timeout: an export takes as long as its rows.
func (d *DB) StreamAuditExport(ctx context.Context, plan ExportPlan, row func([]sql.NullString) error) error {
	args := make([]any, len(plan.Args))
	for i, a := range plan.Args {
		args[i] = a
	}
	// One read-only transaction, one statement: one snapshot, so rows committed meanwhile do
	// not half-appear; and the settings apply to this export only.
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("export: %w", translate(err))
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep
	for _, s := range plan.Settings {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("export: %s: %w", s, translate(err))
		}
	}
	rows, err := tx.QueryContext(ctx, plan.Query, args...)
	if err != nil {
		return fmt.Errorf("export: %w", translate(err))
	}
	defer rows.Close()
	vals := make([]sql.NullString, len(plan.Columns))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("export: %w", translate(err))
		}
		if err := row(vals); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("export: %w", translate(err))
	}
	return nil
}
