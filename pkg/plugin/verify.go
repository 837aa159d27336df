package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
)

// errFindings is what verify returns when the report has findings: exit 1, the report already
// printed, as `archiver logs verify` does.
var errFindings = errors.New("findings")

// newVerifyCommand is `verify job NAME`: the job's archive re-read and compared with the database
// by the server (archivedjobs/verify, verify.Job), printed as `archiver logs verify` prints it.
func newVerifyCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "verify job NAME|UID [-o json]",
		Short: "Verify a job's archive against its records (exit 1 on findings), as archiver logs verify does",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobKind(args[0]); err != nil {
				return err
			}
			if output != "" && output != "json" {
				return fmt.Errorf("--output %q: use json or leave it out", output)
			}
			c, err := newClient(flags, streams.ErrOut)
			if err != nil {
				return err
			}
			rep, err := c.verify(cmd.Context(), args[1])
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(streams.Out)
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
			} else {
				err = rep.WriteText(streams.Out)
			}
			switch {
			case err != nil:
				return fmt.Errorf("write the report: %w", err)
			case !rep.OK():
				return errFindings
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json; the text of archiver logs verify without it.")
	return cmd
}

// jobKind checks the kind argument of describe and verify: the archive holds jobs.
func jobKind(kind string) error {
	switch kind {
	case "jobs", "job", v1alpha1.Resource, "archivedjob":
		return nil
	}
	return fmt.Errorf("the archive holds jobs: name one as job NAME, not %q", kind)
}

// verify asks the server to verify the job's archive and returns the report.
func (c *client) verify(ctx context.Context, name string) (verify.JobReport, error) {
	raw, err := doRaw(ctx, c.request(c.namespace, v1alpha1.Resource, name, v1alpha1.VerifySubresource))
	if err != nil {
		return verify.JobReport{}, err
	}
	var v v1alpha1.ArchivedJobVerification
	if err := json.Unmarshal(raw, &v); err != nil {
		return verify.JobReport{}, fmt.Errorf("decode the verification of job %s: %w", name, err)
	}
	return ReportOf(&v), nil
}

// ReportOf is the report of verify.Job an ArchivedJobVerification carries (the inverse of
// apiserver.VerificationOf), to print it with verify.JobReport's own WriteText.
func ReportOf(v *v1alpha1.ArchivedJobVerification) verify.JobReport {
	rep := verify.JobReport{
		Job:          archive.JobRef{Namespace: v.Namespace, Name: v.Name, UID: string(v.UID)},
		ArchiveState: record.ArchiveState(v.ArchiveState),
		Location:     v.Location,
		Logs:         int(v.Logs),
		Stored:       int(v.Stored),
		Unavailable:  int(v.Unavailable),
		Unreferenced: v.Unreferenced,
	}
	for _, f := range v.Findings {
		rep.Findings = append(rep.Findings, verify.Finding{Kind: verify.Kind(f.Kind), Item: f.Item, Key: f.Key, Detail: f.Detail})
	}
	for _, g := range v.Gaps {
		rep.Gaps = append(rep.Gaps, archive.GapEntry{PodUID: g.PodUID, Container: g.Container, Run: g.Run,
			After: goTime(g.After), Before: goTime(g.Before), Reason: g.Reason, Detail: g.Detail})
	}
	return rep
}

func goTime(t *metav1.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
