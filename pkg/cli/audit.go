package cli

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/verify"
)

// auditCommand is `archiver audit`: the chain's evidence, and exports of the audit views.
func auditCommand() *Command {
	return &Command{
		Name: "audit",
		Summary: "Evidence for auditors: every finalized job has a gapless per-cluster sequence number; its " +
			"manifest records the size and sha256 of every object of its archive, the digest of its database " +
			"rows and the sha256 of the previous manifest (a hash chain); a signed digest of the chain head is " +
			"written periodically.",
		Subcommands: []*Command{
			{
				Name: "verify",
				Summary: "Recompute the chain between two sequence numbers: every link, every manifest and object " +
					"(read back and hashed), every database row (digested again), the finalized jobs missing from the " +
					"chain, the objects no manifest lists, and the signed digests (with --audit-public-key). Prints " +
					"each altered, missing, extra, re-ordered or forged item by name and a summary; exits 1 on any finding.",
				Examples: []string{"archiver audit verify --from 1 --to 5000 --audit-public-key pub.pem"},
				Reads:    ReadsDB | ReadsStore,
				bind:     bindAuditVerify,
			},
			{
				Name: "export",
				Summary: "Stream an audit view over a time range as CSV or JSON Lines, deterministically, with the " +
					"query, the time range, the row count and the sha256 of the export beside it.",
				Description: exportDescription(),
				Examples:    []string{"archiver audit export --from 2026-10-01 --to 2026-11-01 --out outcomes.csv"},
				Reads:       ReadsDB,
				bind:        bindExport,
			},
		},
	}
}

// auditVerifyCmd holds the flags of `archiver audit verify`.
type auditVerifyCmd struct {
	src       *sources
	cluster   string
	from, to  int64
	publicKey string
	output    string
	workers   int
	pub       ed25519.PublicKey
}

func bindAuditVerify(fs *flag.FlagSet, src *sources) runner {
	c := &auditVerifyCmd{src: src}
	fs.StringVar(&c.cluster, "cluster-name", "", "Cluster whose chain to verify (the archiver's --cluster-name).")
	fs.Int64Var(&c.from, "from", 1, "First sequence number to verify.")
	fs.Int64Var(&c.to, "to", 0, "Last sequence number to verify; 0 for the chain head (then also the head itself, entries beyond it and finalized jobs missing from the chain).")
	fs.StringVar(&c.publicKey, "audit-public-key", "", "File of the ed25519 public key that signs the chain head (PEM PKIX, 32 raw bytes or 64 hex digits); without it the signed digests' signatures are not checked, and the report says so.")
	fs.StringVar(&c.output, "output", "text", "Output format: text or json.")
	fs.IntVar(&c.workers, "workers", 8, "Entries verified in parallel.")
	return c
}

// validate reports every problem with the command line at once, the public key's file included.
func (c *auditVerifyCmd) validate() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.from < 1 {
		add("--from %d: sequence numbers start at 1", c.from)
	}
	if c.to < 0 || (c.to > 0 && c.to < c.from) {
		add("--to %d: 0 (the head) or at least --from (%d)", c.to, c.from)
	}
	if c.output != "text" && c.output != "json" {
		add("--output %q is not text or json", c.output)
	}
	if c.workers < 1 {
		add("--workers %d: at least 1", c.workers)
	}
	errs = append(errs, c.src.validate(true, true)...)
	if c.publicKey != "" {
		var err error
		c.pub, err = audit.LoadPublicKey(c.publicKey)
		errs = append(errs, err)
	}
	return errs
}

// run prints the chain's report (verify.Chain), its progress on stderr; errFound when it has
// findings.
func (c *auditVerifyCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	records, err := c.src.openDB(ctx, c.workers+2) // a connection per worker, and the chain's reader
	if err != nil {
		return err
	}
	defer records.Close()
	store, err := c.src.openStore(ctx)
	if err != nil {
		return err
	}
	rep, err := verify.Chain(ctx, records, store, verify.ChainOptions{Cluster: c.cluster, From: c.from, To: c.to, Prefix: c.src.prefix,
		PublicKey: c.pub, Progress: stderr, Workers: c.workers})
	if err != nil {
		return err
	}
	return writeReport(stdout, c.output, rep)
}

// exportDescription is the help of `archiver audit export` beyond its summary.
func exportDescription() string {
	return "Streams one audit view for the jobs created in [--from, --to) (and their pods' logs and gaps), " +
		"ordered by a unique key, as CSV (a header line, then one line per row) or JSON Lines. The same command " +
		"over the same rows gives the same bytes: times are RFC 3339 in UTC with microseconds, durations " +
		"seconds, jsonb compact JSON; nothing depends on the time of the export.\n\n" +
		"With --out FILE it writes FILE, FILE.sha256 (sha256sum's format: check with 'sha256sum -c FILE.sha256' " +
		"in FILE's directory) and FILE.meta.json (view, format, range, namespace, the exact query and its " +
		"arguments, the columns, the row count, bytes and sha256); each is written aside and renamed into place " +
		"only when the export is complete. Without --out the export goes to stdout and its row count and sha256 " +
		"to stderr.\n\n" +
		"Views: " + strings.Join(db.AuditViews(), ", ") + ". TIME is RFC 3339 (2026-10-01T00:00:00Z) or a date " +
		"(2026-10-01, midnight UTC)."
}
