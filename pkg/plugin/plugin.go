// Package plugin is kubectl-jobvault, the kubectl plugin that reads jobvault's archive through
// the archive API (archive.jobvault.io, served by `archiver api`) with the user's own kubeconfig
// and context, as kubectl reads live objects: `kubectl jobvault get jobs` and `kubectl jobvault
// logs job/NAME`. Errors read as kubectl's (`Error from server (Forbidden): …`).
package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// Main runs the plugin with args (without the program's name) and returns its exit code.
func Main(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		printError(streams.ErrOut, err)
		return 1
	}
	return 0
}

// NewCommand is the plugin's command tree, with kubectl's kubeconfig flags.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:           "kubectl jobvault",
		Short:         "Read jobvault's archive of Volcano jobs and their logs, with your own Kubernetes credentials",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	flags.AddFlags(root.PersistentFlags())
	root.AddCommand(newGetCommand(flags, streams), newLogsCommand(flags, streams), newUICommand(flags, streams))
	return root
}

// client reads the archive API with the user's kubeconfig.
type client struct {
	rest      rest.Interface
	namespace string
}

func newClient(flags *genericclioptions.ConfigFlags) (*client, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	return &client{rest: cs.RESTClient(), namespace: ns}, nil
}

// request starts a GET of path under archive.jobvault.io/v1alpha1, in namespace ns unless empty.
func (c *client) request(ns string, path ...string) *rest.Request {
	abs := []string{"/apis", v1alpha1.GroupName, v1alpha1.SchemeGroupVersion.Version}
	if ns != "" {
		abs = append(abs, "namespaces", ns)
	}
	return c.rest.Get().AbsPath(append(abs, path...)...)
}

// printError writes err as kubectl does: a refusal of the server with its reason, anything else
// as an error.
func printError(w io.Writer, err error) {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Reason != "" {
		fmt.Fprintf(w, "Error from server (%s): %s\n", status.Status().Reason, status.Status().Message)
		return
	}
	fmt.Fprintf(w, "error: %v\n", err)
}

// newLogsCommand is `logs job/NAME [POD]`: one container run's archived log, as kubectl logs
// prints a live one.
func newLogsCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var (
		container, instance string
		previous            bool
		tail, limitBytes    int64
	)
	cmd := &cobra.Command{
		Use:   "logs job/NAME [POD] [-c CONTAINER] [--previous | --instance previous-N] [--tail N]",
		Short: "Print the archived log of a container of a job's pod (NAME may be the job's UID)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, ok := strings.CutPrefix(args[0], "job/")
			if !ok && strings.Contains(args[0], "/") {
				return fmt.Errorf("%q: only jobs have archived logs: name one as job/NAME", args[0])
			}
			c, err := newClient(flags)
			if err != nil {
				return err
			}
			req := c.request(c.namespace, v1alpha1.Resource, name, v1alpha1.LogSubresource)
			if len(args) == 2 {
				req.Param("pod", args[1])
			}
			for k, v := range map[string]string{"container": container, "instance": instance} {
				if v != "" {
					req.Param(k, v)
				}
			}
			if previous {
				req.Param("previous", "true")
			}
			if tail >= 0 {
				req.Param("tailLines", strconv.FormatInt(tail, 10))
			}
			if limitBytes > 0 {
				req.Param("limitBytes", strconv.FormatInt(limitBytes, 10))
			}
			body, err := req.Stream(cmd.Context())
			if err != nil {
				return err
			}
			defer body.Close()
			_, err = io.Copy(streams.Out, body)
			return err
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", "", "The container; may be left out for a pod with one container.")
	cmd.Flags().BoolVarP(&previous, "previous", "p", false, "The container's run before its last one.")
	cmd.Flags().StringVar(&instance, "instance", "", "The run: current (the default) or previous-N.")
	cmd.Flags().Int64Var(&tail, "tail", -1, "Lines of the end of the log to print; -1: all.")
	cmd.Flags().Int64Var(&limitBytes, "limit-bytes", 0, "Bytes of the log to print at most; 0: all.")
	return cmd
}

// sinceBound is the createdFrom field selector for --since.
func sinceBound(since time.Duration, now time.Time) string {
	return v1alpha1.FieldCreatedFrom + "=" + now.Add(-since).UTC().Format(time.RFC3339)
}
