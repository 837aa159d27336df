package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func TestSelector(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	got := getOptions{submitter: "alice", phase: "Failed", state: "released", since: 24 * time.Hour}.selector(now)
	for _, want := range []string{"spec.submitter=alice", "status.phase=Failed", "status.archiveState=released", "createdFrom=2026-11-24T12:00:00Z"} {
		if !strings.Contains(got, want) {
			t.Errorf("selector %q lacks %q", got, want)
		}
	}
	if got := (getOptions{}).selector(now); got != "" {
		t.Errorf("selector without options = %q, want none", got)
	}
}

func TestPrintErrorAsKubectl(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{apierrors.NewForbidden(schema.GroupResource{Group: "archive.jobvault.io", Resource: "archivedjobs"}, "j", errors.New("no")),
			`Error from server (Forbidden): archivedjobs.archive.jobvault.io "j" is forbidden: no` + "\n"},
		{errors.New("no kubeconfig"), "error: no kubeconfig\n"},
		{fmt.Errorf("read the log: %w", apierrors.NewTooManyRequests("2 verifications are running", 5)),
			"Error from server (TooManyRequests): 2 verifications are running\n"},
		{&apierrors.StatusError{ErrStatus: metav1.Status{Message: "the server is confused"}}, "Error from server: the server is confused\n"},
	} {
		var b bytes.Buffer
		printError(&b, c.err)
		if b.String() != c.want {
			t.Errorf("printError(%v) = %q, want %q", c.err, b.String(), c.want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"get", "pods"},
		{"get", "jobs", "-o", "xml"},
		{"logs", "pod/x"},
	} {
		var out, errOut bytes.Buffer
		code := Main(t.Context(), append([]string{"--kubeconfig", "/nonexistent"}, args...), genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
		if code != 1 || !strings.HasPrefix(errOut.String(), "error: ") {
			t.Errorf("%v: exit %d, %q; want 1 and an error", args, code, errOut.String())
		}
	}
}
