package realnode

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeDeleteTail: a user deletes a running job whose container handles SIGTERM by writing
// for 3 s more (its grace period is 10 s). The kubelet keeps it running, writing, through that;
// the archive holds the tail, and the pod is released only after its container ended. The
// kubelet removes a deleted pod's container, and its log, seconds after it ends: the capture has
// that long to finish. The log deadline is short so that a capture that missed it ends within
// the test, as an unavailable log, rather than after the default 24 h.
func TestRealNodeDeleteTail(t *testing.T) {
	s, rn := rig(t, "--log-deadline=20s")
	job := testbed.Job(s.NS, "deleted").Task("w", 1, []string{"main"}, testbed.GracePeriod(10),
		rn.Pods(map[string]testbed.Workload{"main": {Bytes: 20 << 10, For: 2 * time.Second, Hold: time.Hour,
			TermBytes: 30 << 10, TermFor: 3 * time.Second}})).Obj()
	name := testbed.PodName(job.Name, "w", 0)
	stack.CreateAs(t, s.Env, "erin", job)
	var uid string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var p corev1.Pod
		if err := s.Env.Client.Get(t.Context(), client.ObjectKey{Namespace: s.NS, Name: name}, &p); err == nil {
			uid = string(p.UID)
			if len(rn.Written(s.NS, uid, "main", 0)) == 20<<10 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s did not write its output within 2 minutes", name)
		}
	}
	if err := s.Env.Client.Delete(t.Context(), stack.GetJob(t, s.Env, job)); err != nil {
		t.Fatal(err)
	}
	// Watch the pod until it is gone: its finalizer must hold it until its container terminated.
	last := s.WaitPodGone(t, name, 2*time.Minute)
	if cs := last.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Terminated != nil {
		t.Logf("container terminated with exit code %d (%s)", cs[0].State.Terminated.ExitCode, cs[0].State.Terminated.Reason)
	}
	written := rn.Written(s.NS, uid, "main", 0)
	if len(written) != 50<<10 || !bytes.Contains(written, []byte(" term ")) {
		t.Fatalf("the container wrote %d bytes, want 20 KiB and its 30 KiB SIGTERM tail", len(written))
	}
	rows := logRows(t, s, string(last.OwnerReferences[0].UID))
	row, ok := rows["main/current"]
	if !ok || len(rows) != 1 {
		t.Fatalf("log rows %v, want the container's current log only", rows)
	}
	s.CheckLog(t, row, written)
}
