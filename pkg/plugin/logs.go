package plugin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// logsOptions are the flags of `logs`, named as kubectl logs names them.
type logsOptions struct {
	container, instance string
	previous            bool
	timestamps          bool
	allContainers       bool
	prefix              bool
	tail, limitBytes    int64
}

// newLogsCommand is `logs job/NAME [POD]`: a container's log, as kubectl logs prints a live one,
// whether the job still runs or not. The current run of a container whose pod still exists is
// read live (pods/log); what the node no longer has, earlier runs and the pods it collected, and
// every log of a finished job, is read from the archive.
func newLogsCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:   "logs job/NAME [POD] [-c CONTAINER | --all-containers] [--previous | --instance previous-N] [--tail N] [--prefix] [--timestamps]",
		Short: "Print a container's log of a job's pod, live while it runs, from the archive otherwise (NAME may be the job's UID)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, ok := strings.CutPrefix(args[0], "job/")
			if !ok && strings.Contains(args[0], "/") {
				return fmt.Errorf("%q: only jobs have archived logs: name one as job/NAME", args[0])
			}
			if o.allContainers && o.container != "" {
				return fmt.Errorf("--all-containers=true should not be specified with container name %s", o.container)
			}
			c, err := newClient(flags, streams.ErrOut)
			if err != nil {
				return err
			}
			pod := ""
			if len(args) == 2 {
				pod = args[1]
			}
			return c.logs(cmd.Context(), streams.Out, name, pod, o)
		},
	}
	cmd.Flags().StringVarP(&o.container, "container", "c", "", "The container; may be left out for a pod with one container.")
	cmd.Flags().BoolVar(&o.allContainers, "all-containers", false, "Every container of the pod, one after the other.")
	cmd.Flags().BoolVar(&o.prefix, "prefix", false, "Prefix each line with its source: [pod/POD/CONTAINER].")
	cmd.Flags().BoolVar(&o.timestamps, "timestamps", false,
		"Include each line's timestamp, as kubectl logs does: on the lines read live. The archive holds none: a log read from it is printed as the container wrote it, with a warning on stderr.")
	cmd.Flags().BoolVarP(&o.previous, "previous", "p", false, "The container's run before its last one.")
	cmd.Flags().StringVar(&o.instance, "instance", "", "The run: current (the default) or previous-N.")
	cmd.Flags().Int64Var(&o.tail, "tail", -1, "Lines of the end of the log to print; -1: all.")
	cmd.Flags().Int64Var(&o.limitBytes, "limit-bytes", 0, "Bytes of the log to print at most; 0: all.")
	return cmd
}

// live reports whether the options ask for a container's current run, which a running job's
// node may still serve.
func (o logsOptions) live() bool {
	return !o.previous && (o.instance == "" || o.instance == "current")
}

// logs prints the logs the options select of the job's pod (named, or the job's only one).
func (c *client) logs(ctx context.Context, out io.Writer, name, pod string, o logsOptions) error {
	job, err := c.job(ctx, name)
	if err != nil {
		return err
	}
	running := job.Status.ArchiveState == "pending"
	p, err := selectPod(job, pod, running)
	if err != nil {
		return err
	}
	containers := []string{o.container}
	if o.allContainers {
		if containers = c.containers(ctx, job.Namespace, p, running); len(containers) == 0 {
			return fmt.Errorf("pod %s of job %s has no container with a log", p.Name, job.Name)
		}
	}
	for _, ctr := range containers {
		w := out
		if o.prefix {
			w = &prefixer{w: out, prefix: []byte("[pod/" + p.Name + "/" + orNone(ctr, soleContainer(p)) + "] "), start: true}
		}
		if err := c.containerLog(ctx, w, job, p, ctr, running, o); err != nil {
			return err
		}
	}
	return nil
}

// containerLog prints one container's log: live through pods/log while the job runs and its pod
// is there, from the archive otherwise (and when the pod is gone: NotFound).
func (c *client) containerLog(ctx context.Context, w io.Writer, job *v1alpha1.ArchivedJob, p v1alpha1.ArchivedPod, container string, running bool, o logsOptions) error {
	if running && o.live() {
		err := c.liveLog(ctx, w, job.Namespace, p.Name, container, o)
		if !apierrors.IsNotFound(err) {
			return err
		}
	}
	pod := p.UID
	if pod == "" {
		pod = p.Name
	}
	req := c.request(job.Namespace, v1alpha1.Resource, string(job.UID), v1alpha1.LogSubresource).Param("pod", pod)
	for k, v := range map[string]string{"container": container, "instance": o.instance} {
		if v != "" {
			req.Param(k, v)
		}
	}
	if o.previous {
		req.Param("previous", "true")
	}
	if o.timestamps { // the server answers with the log and a warning that it holds no timestamps
		req.Param("timestamps", "true")
	}
	if o.tail >= 0 {
		req.Param("tailLines", strconv.FormatInt(o.tail, 10))
	}
	if o.limitBytes > 0 {
		req.Param("limitBytes", strconv.FormatInt(o.limitBytes, 10))
	}
	return copyStream(ctx, w, req.Stream)
}

// liveLog prints the current run's log of a pod that still exists, as kubectl logs does.
func (c *client) liveLog(ctx context.Context, w io.Writer, ns, pod, container string, o logsOptions) error {
	opts := &corev1.PodLogOptions{Container: container, Timestamps: o.timestamps}
	if o.tail >= 0 {
		opts.TailLines = &o.tail
	}
	if o.limitBytes > 0 {
		opts.LimitBytes = &o.limitBytes
	}
	return copyStream(ctx, w, c.core.Pods(ns).GetLogs(pod, opts).Stream)
}

// copyStream opens a stream and copies it to w.
func copyStream(ctx context.Context, w io.Writer, open func(context.Context) (io.ReadCloser, error)) error {
	body, err := open(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	if _, err := io.Copy(w, body); err != nil {
		return fmt.Errorf("read the log: %w", err)
	}
	return nil
}

// selectPod picks the pod named (by name or UID; the latest of a name Volcano reused), or the
// job's only pod. A pod of a running job that the archive has not recorded yet is taken by its
// name: the node may serve it.
func selectPod(job *v1alpha1.ArchivedJob, pod string, running bool) (v1alpha1.ArchivedPod, error) {
	pods := job.Status.Pods
	if pod == "" {
		names := []string{}
		for _, p := range pods {
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
		if len(names) != 1 {
			return v1alpha1.ArchivedPod{}, fmt.Errorf("a pod must be named for job %s with %d pods: choose one of %v", job.Name, len(names), names)
		}
		pod = names[0]
	}
	for i := len(pods) - 1; i >= 0; i-- { // oldest first: the latest of a name wins
		if pods[i].Name == pod || pods[i].UID == pod {
			return pods[i], nil
		}
	}
	if running {
		return v1alpha1.ArchivedPod{Name: pod}, nil
	}
	return v1alpha1.ArchivedPod{}, apierrors.NewNotFound(corev1.Resource("pods"), pod)
}

// containers lists the pod's containers for --all-containers: those the archive recorded, then,
// while the job runs, those of the live pod the archive has not seen yet (when the user may get
// the pod: otherwise the archive's alone).
func (c *client) containers(ctx context.Context, ns string, p v1alpha1.ArchivedPod, running bool) []string {
	var names []string
	for _, ctr := range p.Containers {
		names = append(names, ctr.Name)
	}
	if !running {
		return names
	}
	live, err := c.core.Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return names
	}
	for _, list := range [][]corev1.Container{live.Spec.InitContainers, live.Spec.Containers} {
		for _, ctr := range list {
			if !slices.Contains(names, ctr.Name) {
				names = append(names, ctr.Name)
			}
		}
	}
	return names
}

// soleContainer names the pod's only recorded container, for the prefix of a log whose container
// was left out.
func soleContainer(p v1alpha1.ArchivedPod) string {
	if len(p.Containers) == 1 {
		return p.Containers[0].Name
	}
	return ""
}

// prefixer writes each line after prefix, as kubectl logs --prefix does, in bounded memory
// whatever the lines' length.
type prefixer struct {
	w      io.Writer
	prefix []byte
	start  bool // the next byte begins a line
}

func (p *prefixer) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		if p.start {
			if _, err := p.w.Write(p.prefix); err != nil {
				return 0, err
			}
			p.start = false
		}
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, p.start = b[:i+1], true
		}
		if _, err := p.w.Write(line); err != nil {
			return 0, err
		}
		b = b[len(line):]
	}
	return n, nil
}
