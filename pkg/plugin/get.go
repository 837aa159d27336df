package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// tableAccept asks the server for the table kubectl get prints, JSON otherwise.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

// getOptions are the flags of `get jobs`.
type getOptions struct {
	allNamespaces           bool
	submitter, phase, state string
	since                   time.Duration
	output                  string
	chunkSize               int64
}

// selector is the field selector of the options.
func (o getOptions) selector(now time.Time) string {
	var sel []string
	for field, v := range map[string]string{v1alpha1.FieldSubmitter: o.submitter, v1alpha1.FieldPhase: o.phase, v1alpha1.FieldArchiveState: o.state} {
		if v != "" {
			sel = append(sel, field+"="+v)
		}
	}
	if o.since > 0 {
		sel = append(sel, sinceBound(o.since, now))
	}
	return strings.Join(sel, ",")
}

// newGetCommand is `get jobs [NAME]`: the archived jobs of a namespace (or all), as kubectl get
// prints live objects, paged on the server's keyset.
func newGetCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:   "get jobs [NAME|UID] [-n NS | -A] [--submitter U] [--phase P] [--state S] [--since 7d] [-o wide|json|yaml]",
		Short: "List archived jobs, or get one by its name (the latest of that name) or UID",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "jobs", "job", v1alpha1.Resource, "archivedjob":
			default:
				return fmt.Errorf("the archive holds jobs: kubectl jobvault get jobs, not %q", args[0])
			}
			switch o.output {
			case "", "wide", "json", "yaml":
			default:
				return fmt.Errorf("--output %q: use wide, json or yaml", o.output)
			}
			c, err := newClient(flags, streams.ErrOut)
			if err != nil {
				return err
			}
			ns := c.namespace
			if o.allNamespaces {
				ns = ""
			}
			p := printer(o)
			if len(args) == 2 {
				obj, err := c.getOne(cmd.Context(), ns, args[1], o.output)
				if err != nil {
					return err
				}
				return p.PrintObj(obj, streams.Out)
			}
			obj, err := c.list(cmd.Context(), ns, o)
			if err != nil {
				return err
			}
			return p.PrintObj(obj, streams.Out)
		},
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "List the jobs of every namespace (needs the rights cluster-wide).")
	cmd.Flags().StringVar(&o.submitter, "submitter", "", "Only the jobs this user submitted.")
	cmd.Flags().StringVar(&o.phase, "phase", "", "Only the jobs in this (final) phase, e.g. Failed.")
	cmd.Flags().StringVar(&o.state, "state", "", "Only the jobs in this archive state: pending, archived or released.")
	cmd.Flags().DurationVar(&o.since, "since", 0, "Only the jobs created within this duration, e.g. 168h.")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: wide, json or yaml.")
	cmd.Flags().Int64Var(&o.chunkSize, "chunk-size", 500, "Jobs asked of the server per page.")
	return cmd
}

// printer prints as -o asks: a table (wide or not), JSON or YAML.
func printer(o getOptions) printers.ResourcePrinter {
	switch o.output {
	case "json":
		return &printers.JSONPrinter{}
	case "yaml":
		return &printers.YAMLPrinter{}
	}
	return printers.NewTablePrinter(printers.PrintOptions{Wide: o.output == "wide", WithNamespace: o.allNamespaces})
}

// getOne reads one job, as a table or as the object.
func (c *client) getOne(ctx context.Context, ns, name, output string) (runtime.Object, error) {
	req := c.request(ns, v1alpha1.Resource, name)
	if output == "json" || output == "yaml" {
		raw, err := doRaw(ctx, req)
		if err != nil {
			return nil, err
		}
		var job v1alpha1.ArchivedJob
		if err := json.Unmarshal(raw, &job); err != nil {
			return nil, fmt.Errorf("decode job %s: %w", name, err)
		}
		job.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("ArchivedJob"))
		return &job, nil
	}
	return tableOf(ctx, req.SetHeader("Accept", tableAccept))
}

// list reads every page of the jobs the options select, as one table or one list.
func (c *client) list(ctx context.Context, ns string, o getOptions) (runtime.Object, error) {
	sel := o.selector(time.Now())
	var (
		table *metav1.Table
		list  = &v1alpha1.ArchivedJobList{}
		cont  string
	)
	list.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("ArchivedJobList"))
	for {
		req := c.request(ns, v1alpha1.Resource).Param("limit", strconv.FormatInt(o.chunkSize, 10))
		if sel != "" {
			req.Param("fieldSelector", sel)
		}
		if cont != "" {
			req.Param("continue", cont)
		}
		if o.output == "json" || o.output == "yaml" {
			raw, err := doRaw(ctx, req)
			if err != nil {
				return nil, err
			}
			var page v1alpha1.ArchivedJobList
			if err := json.Unmarshal(raw, &page); err != nil {
				return nil, fmt.Errorf("decode jobs: %w", err)
			}
			for i := range page.Items {
				page.Items[i].SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("ArchivedJob"))
			}
			list.Items = append(list.Items, page.Items...)
			if cont = page.Continue; cont == "" {
				return list, nil
			}
			continue
		}
		page, err := tableOf(ctx, req.SetHeader("Accept", tableAccept))
		if err != nil {
			return nil, err
		}
		if table == nil {
			table = page
		} else {
			table.Rows = append(table.Rows, page.Rows...)
		}
		if cont = page.Continue; cont == "" {
			table.Continue = ""
			return table, nil
		}
	}
}

// tableOf reads a table, its rows' objects decoded (the namespace column needs them).
func tableOf(ctx context.Context, req *rest.Request) (*metav1.Table, error) {
	raw, err := doRaw(ctx, req)
	if err != nil {
		return nil, err
	}
	var t metav1.Table
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decode table: %w", err)
	}
	for i := range t.Rows {
		if len(t.Rows[i].Object.Raw) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(t.Rows[i].Object.Raw); err != nil {
			return nil, fmt.Errorf("decode table row: %w", err)
		}
		t.Rows[i].Object.Object = u
	}
	t.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("Table"))
	return &t, nil
}
