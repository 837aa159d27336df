package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/verify"
)

// newDescribeCommand is `describe job NAME`: the job's record for people, as kubectl describe
// prints a live object: its phase timeline, pods, containers and every run's log with its state,
// the gaps with their reasons, the archive's state and location, and the verification's outcome.
func newDescribeCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "describe job NAME|UID",
		Short: "Show an archived job in detail: phases, pods, containers, log runs, gaps, archive and verification",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobKind(args[0]); err != nil {
				return err
			}
			c, err := newClient(flags, streams.ErrOut)
			if err != nil {
				return err
			}
			job, err := c.job(cmd.Context(), args[1])
			if err != nil {
				return err
			}
			// Verification needs the right to read the logs, which a reader of jobs may lack:
			// its refusal is part of the description, not a failure of it.
			rep, verr := c.verify(cmd.Context(), string(job.UID))
			return writeDescription(streams.Out, job, rep, verr, time.Now())
		},
	}
}

// job reads one archived job, whole.
func (c *client) job(ctx context.Context, name string) (*v1alpha1.ArchivedJob, error) {
	raw, err := doRaw(ctx, c.request(c.namespace, v1alpha1.Resource, name))
	if err != nil {
		return nil, err
	}
	var job v1alpha1.ArchivedJob
	if err := json.Unmarshal(raw, &job); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", name, err)
	}
	return &job, nil
}

// writeDescription prints the job as kubectl describe does: fields, then sections indented.
// verr is why the verification could not run (rep is then empty).
func writeDescription(out io.Writer, job *v1alpha1.ArchivedJob, rep verify.JobReport, verr error, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	st, sp := job.Status, job.Spec
	field := func(indent int, name, value string) {
		fmt.Fprintf(w, "%s%s:\t%s\n", strings.Repeat("  ", indent), name, value)
	}
	field(0, "Name", job.Name)
	field(0, "Namespace", job.Namespace)
	field(0, "UID", string(job.UID))
	submitter := orNone(sp.Submitter, "<unknown>")
	if len(sp.SubmitterGroups) > 0 {
		submitter += " (groups: " + strings.Join(sp.SubmitterGroups, ", ") + ")"
	}
	field(0, "Submitter", submitter)
	field(0, "Queue", orNone(sp.Queue, "<none>"))
	if sp.Cluster != "" {
		field(0, "Cluster", sp.Cluster)
	}
	field(0, "Created", when(&job.CreationTimestamp, now))
	field(0, "Phase", orNone(st.Phase, "<unknown>"))
	field(0, "Retry Count", fmt.Sprint(st.RetryCount))
	field(0, "Finished", when(st.FinishedAt, now))
	fmt.Fprintln(w, "Archive:")
	field(1, "State", st.ArchiveState)
	field(1, "Location", orNone(st.ArchiveLocation, "<none>"))
	field(1, "Archived", when(st.ArchivedAt, now))
	if st.ReleaseReason != "" {
		field(1, "Release Reason", st.ReleaseReason)
	}
	writeTimeline(w, st.Transitions, now)
	writePods(w, st.Pods, now)
	writeVerification(w, rep, verr)
	return w.Flush()
}

// writeTimeline prints the phase changes, oldest first, with how long each phase lasted.
func writeTimeline(w io.Writer, ts []v1alpha1.PhaseTransition, now time.Time) {
	if len(ts) == 0 {
		fmt.Fprintln(w, "Phases:\t<none>")
		return
	}
	fmt.Fprintln(w, "Phases:")
	fmt.Fprintln(w, "  Time\tPhase\tFor\tReason\tMessage")
	fmt.Fprintln(w, "  ----\t-----\t---\t------\t-------")
	for i, t := range ts {
		lasted := "-"
		if i+1 < len(ts) {
			lasted = ts[i+1].Time.Sub(t.Time.Time).Round(time.Second).String()
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", t.Time.UTC().Format(time.RFC3339), t.Phase, lasted, orNone(t.Reason, "-"), oneLine(t.Message))
	}
}

// writePods prints each pod with its containers, each run's log and the gaps recorded.
func writePods(w io.Writer, pods []v1alpha1.ArchivedPod, now time.Time) {
	if len(pods) == 0 {
		fmt.Fprintln(w, "Pods:\t<none>")
		return
	}
	fmt.Fprintln(w, "Pods:")
	for _, p := range pods {
		fmt.Fprintf(w, "  %s:\n", p.Name)
		fmt.Fprintf(w, "    UID:\t%s\n", p.UID)
		fmt.Fprintf(w, "    Task:\t%s\n", orNone(p.Task, "<none>"))
		fmt.Fprintf(w, "    Node:\t%s\n", orNone(p.Node, "<none>"))
		phase := orNone(p.Phase, "<unknown>")
		if p.DeletedBeforeTerminal {
			phase += " (deleted before it ended)"
		}
		fmt.Fprintf(w, "    Phase:\t%s\n", phase)
		fmt.Fprintf(w, "    Started:\t%s\n", when(p.StartedAt, now))
		fmt.Fprintf(w, "    Finished:\t%s\n", when(p.FinishedAt, now))
		archived := p.ArchiveState
		if p.ReleaseReason != "" {
			archived += ": " + p.ReleaseReason
		}
		fmt.Fprintf(w, "    Archive:\t%s\n", orNone(archived, "<unknown>"))
		if len(p.Containers) == 0 {
			fmt.Fprintln(w, "    Containers:\t<none recorded>")
			continue
		}
		fmt.Fprintln(w, "    Containers:")
		for _, c := range p.Containers {
			writeContainer(w, c)
		}
	}
}

// writeContainer prints a container's runs (instance, state, size, sha256 or why unavailable) and
// its gaps.
func writeContainer(w io.Writer, c v1alpha1.ArchivedContainer) {
	fmt.Fprintf(w, "      %s (%s):\n", c.Name, c.Type)
	for _, i := range c.Instances {
		detail := "sha256 " + i.SHA256
		if i.State != "stored" {
			detail = i.Reason
		}
		fmt.Fprintf(w, "        %s\t%s\t%d bytes\t%s\n", i.Name, i.State, i.Bytes, detail)
	}
	for _, g := range c.Gaps {
		bounds := "the run's start"
		if g.After != nil {
			bounds = g.After.UTC().Format(time.RFC3339)
		}
		end := "the run's end"
		if g.Before != nil {
			end = g.Before.UTC().Format(time.RFC3339)
		}
		reason := g.Reason
		if g.Detail != "" {
			reason += " (" + oneLine(g.Detail) + ")"
		}
		fmt.Fprintf(w, "        gap\trun %d\tfrom %s to %s\t%s\n", g.Run, bounds, end, reason)
	}
}

// writeVerification prints the verification's verdict and every finding, or why it did not run.
func writeVerification(w io.Writer, rep verify.JobReport, verr error) {
	if verr != nil {
		fmt.Fprintf(w, "Verification:\tnot run: %s\n", errorText(verr))
		return
	}
	verdict := "OK"
	if !rep.OK() {
		verdict = fmt.Sprintf("FAILED: %d problem(s)", len(rep.Findings))
	}
	fmt.Fprintf(w, "Verification:\t%s: %d log(s), %d stored and re-read, %d unavailable\n", verdict, rep.Logs, rep.Stored, rep.Unavailable)
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "  %s\n", strings.TrimSuffix(f.String(), "\n"))
	}
	for _, k := range rep.Unreferenced {
		fmt.Fprintf(w, "  unreferenced object [%s]: no record names it\n", k)
	}
}

func when(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "<none>"
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), now.Sub(t.Time).Round(time.Second))
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// oneLine keeps a recorded message (a tenant's text) to one line of the table.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
