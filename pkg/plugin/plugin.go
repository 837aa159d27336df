// Package plugin is kubectl-jobvault, the kubectl plugin that reads jobvault's archive through
// the archive API (archive.jobvault.io, served by the apiserver program) with the user's own kubeconfig
// and context, as kubectl reads live objects: `kubectl jobvault get jobs`, `describe job NAME`,
// `logs job/NAME` (live from the node while the job runs, from the archive for the rest) and
// `verify job NAME`. Errors read as kubectl's (`Error from server (Forbidden): …`).
package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// Main runs the plugin with args (without the program's name) and returns its exit code.
func Main(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		if !errors.Is(err, errFindings) { // the report said it already
			printError(streams.ErrOut, err)
		}
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
	root.AddCommand(newDescribeCommand(flags, streams), newVerifyCommand(flags, streams))
	return root
}

// client reads the archive API with the user's kubeconfig.
type client struct {
	rest      rest.Interface
	core      corev1client.CoreV1Interface // the live objects: pods/log of a running job
	namespace string
}

// newClient reads with the user's kubeconfig. The API's warnings go to errOut as kubectl prints
// them ("Warning: …", each once). Go's transport asks for gzip and decompresses it, so a whole
// archived log comes as the store keeps it (see the log subresource) unless the kubeconfig
// disables compression.
func newClient(flags *genericclioptions.ConfigFlags, errOut io.Writer) (*client, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.WarningHandler = rest.NewWarningWriter(errOut, rest.WarningWriterOptions{Deduplicate: true})
	// The core group's client and discovery's untyped one (the archive API is read by path), on
	// one HTTP client: not the whole clientset, whose every typed client would weigh on the binary.
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	core, err := corev1client.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	untyped, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	return &client{rest: untyped.RESTClient(), core: core, namespace: ns}, nil
}

// request starts a GET of path under archive.jobvault.io/v1alpha1, in namespace ns unless empty.
func (c *client) request(ns string, path ...string) *rest.Request {
	abs := []string{"/apis", v1alpha1.GroupName, v1alpha1.SchemeGroupVersion.Version}
	if ns != "" {
		abs = append(abs, "namespaces", ns)
	}
	return c.rest.Get().AbsPath(append(abs, path...)...)
}

// doRaw sends req and returns the answer's body. A refusal is returned with the Status the API
// sent, whose message kubectl would print: Result.Error decodes it, where Request.DoRaw and
// Result.Raw leave the message "unknown".
func doRaw(ctx context.Context, req *rest.Request) ([]byte, error) {
	res := req.Do(ctx)
	if err := res.Error(); err != nil {
		return nil, err
	}
	return res.Raw()
}

// printError writes err as kubectl does: a refusal of the server with its reason, anything else
// as an error.
func printError(w io.Writer, err error) {
	fmt.Fprintln(w, errorText(err))
}

// errorText is err as kubectl says it: "Error from server (Reason): message" for a status of the
// server, "error: …" for anything else.
func errorText(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if reason := status.Status().Reason; reason != "" {
			return fmt.Sprintf("Error from server (%s): %s", reason, status.Status().Message)
		}
		return "Error from server: " + status.Status().Message
	}
	return "error: " + err.Error()
}

// sinceBound is the createdFrom field selector for --since.
func sinceBound(since time.Duration, now time.Time) string {
	return v1alpha1.FieldCreatedFrom + "=" + now.Add(-since).UTC().Format(time.RFC3339)
}
