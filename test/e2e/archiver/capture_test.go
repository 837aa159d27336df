package archiver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/pkg/verify"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// The live capture proofs run on the faithful node model (testbed.Runtime): containers write
// over time, the node rotates their logs and deletes a deleted pod's logs after its containers
// stop. Byte-exact is against what the container wrote (Runtime.Written).

// logRow returns the recorded log of the container's instance of the job's only pod.
func logRow(t *testing.T, s *stack.Rig, jobUID, container, instance string) record.LogObject {
	t.Helper()
	logs, err := s.Records.LogObjects(t.Context(), jobUID)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		if l.Container == container && l.Instance == instance {
			return l
		}
	}
	t.Fatalf("no log %s (%s) recorded among %v", container, instance, logs)
	return record.LogObject{}
}

// writingJob submits, as erin, a one-pod job named name whose container writes out, one chunk
// every every, for runsFor before it completes; it returns the job and its pod's name.
func writingJob(t *testing.T, s *stack.Rig, rt *testbed.Runtime, name, runsFor string, out []testbed.Chunk, every time.Duration) (*batchv1alpha1.Job, string) {
	t.Helper()
	job := testbed.Job(s.NS, name).Task("w", 1, []string{"main"}, testbed.RunsFor(runsFor)).Obj()
	pod := testbed.PodName(job.Name, "w", 0)
	rt.Run(t, s.NS, pod, map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{out}, Every: every}})
	stack.CreateAs(t, s.Env, "erin", job)
	return job, pod
}

// wroteAll returns what the pod's container wrote in its first run, and fails the test unless that
// is all of out: the container ended before writing it all, so the test's timing is off.
func wroteAll(t *testing.T, s *stack.Rig, rt *testbed.Runtime, pod string, out []testbed.Chunk) []byte {
	t.Helper()
	written := rt.Written(s.NS, pod, "main", 0)
	if !bytes.Equal(written, testbed.Bytes(out)) {
		t.Fatalf("the container wrote %d of %d bytes before it ended: the test's timing is off", len(written), len(testbed.Bytes(out)))
	}
	return written
}

// waitWritten waits until the pod's container wrote at least n bytes in its first run.
func waitWritten(t *testing.T, s *stack.Rig, rt *testbed.Runtime, pod string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(rt.Written(s.NS, pod, "main", 0)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("pod %s wrote %d bytes in a minute, want %d", pod, len(rt.Written(s.NS, pod, "main", 0)), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSegment waits until the capture of pod's container main, run 0, has recorded a segment.
func waitSegment(t *testing.T, s *stack.Rig, pod string) {
	t.Helper()
	var p corev1.Pod
	deadline := time.Now().Add(time.Minute)
	for {
		if err := s.Env.Client.Get(t.Context(), client.ObjectKey{Namespace: s.NS, Name: pod}, &p); err == nil {
			if segs, err := s.Records.Segments(t.Context(), string(p.UID), "main", 0); err == nil && len(segs) > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no segment of pod %s recorded in a minute", pod)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCaptureThroughRotation: a container writes 6 MiB over 6 s while its node rotates the log
// every 256 KiB and keeps two files; a read at the end would return at most 256 KiB. It runs with
// a busy process per CPU beside it, as on a loaded machine, where a follow stream can fall more
// than a file behind and the node's reader then skips files (on a quiet machine, before the skip
// watch erred toward a gap, it lost 205 KB with no gap under load). Every loss is detected: the
// archive is what was written less some lines, with a recorded gap for each run of lines missing,
// and the job is archived only if the log is whole.
func TestCaptureThroughRotation(t *testing.T) {
	// Not parallel: it loads every CPU on purpose.
	s := stack.NewRig(t, objstore.BackendS3, "--node-log-max-size=262144") // the skip watch needs the nodes' rotation size
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{MaxSize: 256 << 10, MaxFiles: 2})
	stack.CPUStress(t, 0)
	out := stack.SteadyOutput("rotating", 60, 100<<10)
	job, pod := writingJob(t, s, rt, "rotating", "8s", out, 100*time.Millisecond)
	j := s.WaitArchived(t, job, 3*time.Minute)
	written := wroteAll(t, s, rt, pod, out)
	row := logRow(t, s, string(j.UID), "main", record.InstanceCurrent)
	got, _ := s.ReadLog(t, row.ObjectKey)
	missing := missingRuns(t, written, got)
	g := s.Gaps(t, string(j.UID))
	t.Logf("%d of %d bytes archived; missing: %v; gaps: %+v", len(got), len(written), missing, g)
	if len(g) < len(missing) {
		t.Errorf("%d run(s) of lines missing from the archive, but %d gap(s) recorded", len(missing), len(g))
	}
	jr, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil || (jr.ArchiveState == record.ArchiveArchived) != (len(g) == 0) {
		t.Errorf("job row %s (%v) with %d gap(s), want archived exactly when there is none", jr.ArchiveState, err, len(g))
	}
	if len(g) == 0 {
		s.CheckLog(t, row, written)
	}
	// Each followed line's lag is observed: the early warning of a stream falling a file behind.
	if m := regexp.MustCompile(`(?m)^jobvault_archiver_capture_lag_seconds_count (\d+)`).FindStringSubmatch(s.Metrics(t)); m == nil || m[1] == "0" {
		t.Errorf("no capture lag observed: %q", m)
	}
}

// TestCaptureThroughRotationAtScale is TestCaptureThroughRotation at full scale: 200 MiB over 60 s
// while the node rotates the log every 1 MiB and keeps 5 files, as a kubelet with
// containerLogMaxSize=1Mi does. The follow stream must keep within one file (0.2 s here) of the
// writer: at a rotation the kubelet's reader (KWOK serves logs with it) reopens the log by name,
// so a stream further behind skips the files in between, and nothing in the stream shows it.
//
// It runs with `make test-scale`, not `make test`: on this 2-core machine under load it failed 2 of
// 14 runs, each time short by one or two whole files the node's reader skipped (follow costs the
// API server and the node about 0.1 s of CPU per MiB, so the stream falls behind). The capture
// records such a skip as a "possibly rotated before read" gap (TestCaptureRecordsSkippedFilesAsGap)
// but cannot undo it, so this proof would make CI fail at random.
func TestCaptureThroughRotationAtScale(t *testing.T) {
	if os.Getenv("JOBVAULT_SCALE_PROOFS") == "" {
		t.Skip("a scale proof: run it with make test-scale (JOBVAULT_SCALE_PROOFS=1)")
	}
	s := stack.NewRig(t, objstore.BackendS3)
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{MaxSize: 1 << 20, MaxFiles: 5})
	out := stack.SteadyOutput("at scale", 600, (200<<20)/600)
	start := time.Now()
	job, pod := writingJob(t, s, rt, "at-scale", "68s", out, 100*time.Millisecond)
	j := s.WaitArchived(t, job, 5*time.Minute)
	t.Logf("archived %d MiB in %s from the job's creation", len(testbed.Bytes(out))>>20, time.Since(start).Round(time.Second))
	written := wroteAll(t, s, rt, pod, out)
	row := logRow(t, s, string(j.UID), "main", record.InstanceCurrent)
	s.CheckLog(t, row, written)
	if t.Failed() {
		got, _ := s.ReadLog(t, row.ObjectKey)
		p := commonPrefix(got, written)
		t.Errorf("archived %d of %d bytes written: they agree on the first %d and the last %d", len(got), len(written), p, commonSuffix(got[p:], written[p:]))
	}
	if g := s.Gaps(t, string(j.UID)); len(g) != 0 {
		t.Errorf("gaps %+v, want none", g)
	}
}

// TestCaptureGracePeriodTail: a user deletes a running job; its pod keeps writing shutdown output
// through its 4 s grace period. The archive holds that tail, and the pod is released only once
// its container terminated.
func TestCaptureGracePeriodTail(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendFS)
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{GCDelay: 5 * time.Second})
	job := testbed.Job(s.NS, "cancelled").Task("w", 1, []string{"main"}, testbed.RunsFor("1h"), testbed.GracePeriod(4)).Obj()
	pod := testbed.PodName(job.Name, "w", 0)
	var shutdown []testbed.Chunk
	for i := range 6 {
		shutdown = append(shutdown, testbed.Chunk{Stream: "stderr", Data: []byte(fmt.Sprintf("SIGTERM: checkpoint %d of 6 written\n", i+1))})
	}
	rt.Run(t, s.NS, pod, map[string]testbed.Output{"main": {
		Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: []byte("training...\n")}}}, Shutdown: shutdown, Every: 400 * time.Millisecond}})
	stack.CreateAs(t, s.Env, "erin", job)
	for len(rt.Written(s.NS, pod, "main", 0)) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Env.Client.Delete(t.Context(), stack.GetJob(t, s.Env, job)); err != nil {
		t.Fatal(err)
	}
	// Watch the pod until it is gone: its finalizer must hold it until its container terminated.
	last := s.WaitPodGone(t, pod, 2*time.Minute)
	written := rt.Written(s.NS, pod, "main", 0)
	if !bytes.Contains(written, []byte("checkpoint 6 of 6")) {
		t.Fatalf("the container wrote %q: not its whole shutdown output within its grace period", written)
	}
	logs, err := s.Records.LogObjects(t.Context(), string(last.OwnerReferences[0].UID))
	if err != nil || len(logs) != 1 {
		t.Fatalf("log rows %v (%v), want one", logs, err)
	}
	s.CheckLog(t, logs[0], written)
}

// TestCaptureSurvivesArchiverKill: the archiver is SIGKILLed while it follows a container and
// restarted 5 s later: the archive has no duplicate byte and no hole.
func TestCaptureSurvivesArchiverKill(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3, "--capture-segment-bytes=65536")
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	job, pod := writingJob(t, s, rt, "killed", "14s", stack.SteadyOutput("killed", 100, 10<<10), 100*time.Millisecond)
	waitWritten(t, s, rt, pod, 300<<10)
	s.Proc.Kill()
	time.Sleep(5 * time.Second)
	s.Start(t)
	j := s.WaitArchived(t, job, 3*time.Minute)
	s.CheckLog(t, logRow(t, s, string(j.UID), "main", record.InstanceCurrent), rt.Written(s.NS, pod, "main", 0))
	if g := s.Gaps(t, string(j.UID)); len(g) != 0 {
		t.Errorf("gaps %+v, want none: nothing was rotated away", g)
	}
}

// TestCaptureEndedFirst: with every stream slot taken (--max-streams=1, by a live follow), the
// capture of a container that has ended goes before that of one still running, though it queued
// after it: the node deletes an ended pod's log first. In arrival order, the short job would wait
// for the long one to end.
func TestCaptureEndedFirst(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3, "--max-streams=1")
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	holder, holderPod := writingJob(t, s, rt, "holder", "40s", stack.SteadyOutput("holder", 50, 1<<10), 200*time.Millisecond)
	waitWritten(t, s, rt, holderPod, 1) // its follow holds the only slot
	_, longPod := writingJob(t, s, rt, "long", "60s", stack.SteadyOutput("long", 100, 1<<10), 500*time.Millisecond)
	waitWritten(t, s, rt, longPod, 1) // running, its capture waiting
	out := stack.SteadyOutput("short", 5, 1<<10)
	short, shortPod := writingJob(t, s, rt, "short", "1s", out, 0)
	waitEnded(t, s, shortPod)
	if containerEnded(t, s, holderPod) {
		t.Fatalf("%s ended before %s: the test's timing is off", holderPod, shortPod)
	}

	s.WaitArchived(t, holder, 3*time.Minute)
	j := s.WaitArchived(t, short, 3*time.Minute)
	if containerEnded(t, s, longPod) {
		t.Errorf("job %s archived after %s's container ended: the ended container's capture waited behind the running one's", short.Name, longPod)
	}
	s.CheckLog(t, logRow(t, s, string(j.UID), "main", record.InstanceCurrent), wroteAll(t, s, rt, shortPod, out))
}

// containerEnded reports whether the pod's container has terminated (false while there is no pod).
func containerEnded(t *testing.T, s *stack.Rig, pod string) bool {
	t.Helper()
	var p corev1.Pod
	if err := s.Env.Client.Get(t.Context(), client.ObjectKey{Namespace: s.NS, Name: pod}, &p); apierrors.IsNotFound(err) {
		return false
	} else if err != nil {
		t.Fatal(err)
	}
	return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Terminated != nil
}

// waitEnded waits until the pod's container has terminated.
func waitEnded(t *testing.T, s *stack.Rig, pod string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return containerEnded(t, s, pod), nil
	}); err != nil {
		t.Fatalf("pod %s's container did not end in a minute: %v", pod, err)
	}
}

// TestCaptureRecordsGapWhenDown: the archiver is down (killed) while the node rotates the log
// past what it had read: the archive keeps what was captured before and after, the loss is a
// recorded gap, and the job is released with the reason, never archived. (A stopped archiver,
// SIGSTOP, loses nothing while the buffers of its open follow stream take what the node's reader
// sends; once they are full, that reader falls behind and skips files:
// TestCaptureRecordsSkippedFilesAsGap.)
func TestCaptureRecordsGapWhenDown(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendFS, "--capture-segment-bytes=65536")
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{MaxSize: 64 << 10, MaxFiles: 2})
	job, pod := writingJob(t, s, rt, "down", "12s", stack.SteadyOutput("down", 100, 8<<10), 100*time.Millisecond)
	waitWritten(t, s, rt, pod, 100<<10)
	// The kill lands once the run is resumable, as this test means to prove: killed before its first
	// segment was durable, the restart is a fresh capture, which the start rule judges.
	waitSegment(t, s, pod)
	s.Proc.Kill()
	waitWritten(t, s, rt, pod, len(rt.Written(s.NS, pod, "main", 0))+300<<10) // several rotations of 64 KiB
	s.Start(t)
	j := s.WaitArchived(t, job, 3*time.Minute)
	written := rt.Written(s.NS, pod, "main", 0)
	row := logRow(t, s, string(j.UID), "main", record.InstanceCurrent)
	got, _ := s.ReadLog(t, row.ObjectKey)
	// What was archived is what was written, less one range in the middle.
	// The start is whole lines (every line begins alike, so a byte prefix alone would not tell).
	p := commonPrefix(got, written)
	q := commonSuffix(got[p:], written[p:])
	if p+q != len(got) || p < 64<<10 || q == 0 || len(written)-len(got) < 100<<10 {
		t.Errorf("archived %d of %d bytes written: %d of them the start, %d the end; want the start and the end, less what rotated away while it was down",
			len(got), len(written), p, q)
	}
	g := s.Gaps(t, string(j.UID))
	if len(g) != 1 || g[0].Reason != record.GapRotated || !g[0].Before.After(g[0].After) {
		t.Errorf("gaps %+v, want one rotated-away range", g)
	}
	jr, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil || jr.ArchiveState != record.ArchiveReleased || !strings.Contains(jr.ReleaseReason, string(record.GapRotated)) {
		t.Errorf("job row %s %q (%v), want released with the gap as reason", jr.ArchiveState, jr.ReleaseReason, err)
	}
	s.ExpectEvent(t, "LogIncomplete")
	// verify: the archive matches its records (the manifest lists the gap), and the gap is
	// reported apart from problems.
	rep, err := verify.Job(t.Context(), s.Records, s.Store, string(j.UID), verify.JobOptions{})
	var text strings.Builder
	_ = rep.WriteText(&text)
	if err != nil || !rep.OK() || len(rep.Gaps) != 1 || !strings.Contains(text.String(), "GAP log of container main run 0") {
		t.Errorf("verify (%v):\n%s\nwant OK with the gap reported", err, text.String())
	}
}

// TestCaptureRecordsSkippedFilesAsGap: the archiver is stopped (SIGSTOP) for 8 s while a
// container writes 3 MiB/s on a node that rotates its log at 1 MiB. The follow stream stays open
// but falls many files behind, so at the next rotation the node's reader (the kubelet's, in KWOK)
// skips the files in between, and nothing in the stream says so. Every run of lines missing from
// the archive has a recorded gap, "possibly rotated before read", the job is released with that
// reason, and verify reports the gaps. Before the skip watch, the archive was short and no gap was
// recorded (and the reader's replays of a file doubled lines).
func TestCaptureRecordsSkippedFilesAsGap(t *testing.T) {
	// Not parallel: its writer must keep its pace (see the check on what it wrote).
	s := stack.NewRig(t, objstore.BackendFS, "--node-log-max-size=1048576")
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{MaxSize: 1 << 20, MaxFiles: 2})
	out := stack.SteadyOutput("skipped", 300, 150<<10)
	job, pod := writingJob(t, s, rt, "skipped", "17s", out, 50*time.Millisecond)
	waitWritten(t, s, rt, pod, 3<<20)
	pid := s.Proc.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	time.Sleep(8 * time.Second)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	j := s.WaitArchived(t, job, 3*time.Minute)
	written := wroteAll(t, s, rt, pod, out)
	row := logRow(t, s, string(j.UID), "main", record.InstanceCurrent)
	got, _ := s.ReadLog(t, row.ObjectKey)
	missing := missingRuns(t, written, got)
	if len(missing) == 0 {
		t.Fatalf("all %d bytes archived: the stream never fell a file behind, so the test's timing is off", len(written))
	}
	g := s.Gaps(t, string(j.UID))
	t.Logf("%d of %d bytes archived; missing: %v; gaps: %+v", len(got), len(written), missing, g)
	if len(g) < len(missing) {
		t.Errorf("%d run(s) of lines missing from the archive, but %d gap(s) recorded", len(missing), len(g))
	}
	for _, x := range g {
		// A start unknown is a rotation's too: at this writer's rate, a capture that opened late
		// in the run's start second (under load) may have missed a rotated file before it.
		if x.Reason != record.GapMaybeRotated && x.Reason != record.GapRotated && x.Reason != record.GapUnknownStart {
			t.Errorf("gap %+v, want a rotation's", x)
		}
	}
	jr, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil || jr.ArchiveState != record.ArchiveReleased || !strings.Contains(jr.ReleaseReason, "rotated before read") {
		t.Errorf("job row %s %q (%v), want released with the skipped files as reason", jr.ArchiveState, jr.ReleaseReason, err)
	}
	s.ExpectEvent(t, "LogIncomplete")
	rep, err := verify.Job(t.Context(), s.Records, s.Store, string(j.UID), verify.JobOptions{})
	if err != nil || !rep.OK() || len(rep.Gaps) != len(g) {
		t.Errorf("verify: OK %v, %d gap(s) reported (%v), want OK with the %d gap(s)", rep.OK(), len(rep.Gaps), err, len(g))
	}
}

// missingRuns checks that got is written less some of its lines, in order, and describes each run
// of consecutive lines missing: its first line and its size.
func missingRuns(t *testing.T, written, got []byte) []string {
	t.Helper()
	want, have := bytes.SplitAfter(written, []byte("\n")), bytes.SplitAfter(got, []byte("\n"))
	var runs []string
	i, first, lost := 0, []byte(nil), 0
	for _, w := range append(want, nil) {
		if i < len(have) && bytes.Equal(have[i], w) || w == nil {
			if first != nil {
				runs = append(runs, fmt.Sprintf("%d bytes from %.40q", lost, first))
				first, lost = nil, 0
			}
			i++
			continue
		}
		if first == nil {
			first = w
		}
		lost += len(w)
	}
	if i-1 != len(have) {
		var before []string
		for _, h := range have[max(0, i-4):i] {
			before = append(before, fmt.Sprintf("%.40q", h))
		}
		t.Fatalf("the archive is not the written log less some lines: line %d of %d archived (%.60q, after %v) is not among the lines written after the ones before it", i, len(have), have[i], before)
	}
	return runs
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func commonSuffix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return n
}

// TestCaptureLongAndBinaryLines: lines of 1 MiB (partial records), binary bytes, CRLF and a last
// line without newline are archived byte-exact.
func TestCaptureLongAndBinaryLines(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendGCS)
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	out := []testbed.Chunk{
		{Stream: "stdout", Data: append(bytes.Repeat([]byte("M"), 1<<20), '\n')},
		{Stream: "stderr", Data: []byte("windows line\r\n\x00\x01\x02\xff binary\n")},
		{Stream: "stdout", Data: bytes.Repeat([]byte("no newline at the end "), 50_000)},
	}
	job, pod := writingJob(t, s, rt, "odd", "3s", out, 300*time.Millisecond)
	j := s.WaitArchived(t, job, 2*time.Minute)
	written := wroteAll(t, s, rt, pod, out)
	s.CheckLog(t, logRow(t, s, string(j.UID), "main", record.InstanceCurrent), written)
}

// TestCaptureNodeLost: the node of a running pod is lost; the pod is then evicted (deleted), as
// the node lifecycle controller does. Its containers never report terminated, and its logs can no
// longer be read. Once the node has not been Ready for --node-lost-after, the pod is released at
// once, long before the log deadline: the part captured is kept and the rest recorded as a "node
// lost" gap. Volcano can then recreate the pod.
func TestCaptureNodeLost(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendFS, "--capture-segment-bytes=4096", "--log-deadline=1h", "--node-lost-after=3s")
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	node := s.Env.AddNode(t)
	job := testbed.Job(s.NS, "stranded").Task("w", 1, []string{"main"}, testbed.RunsFor("1h"), testbed.OnNode(node)).Obj()
	pod := testbed.PodName(job.Name, "w", 0)
	rt.Run(t, s.NS, pod, map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{stack.SteadyOutput("stranded", 200, 1<<10)}, Every: 50 * time.Millisecond}})
	stack.CreateAs(t, s.Env, "erin", job)
	waitWritten(t, s, rt, pod, 20<<10)
	time.Sleep(time.Second) // captured and durable (4 KiB segments)
	s.Env.LoseNode(t, node)
	// Volcano recreates the pod under the same name later: keep what this one wrote.
	written := rt.Written(s.NS, pod, "main", 0)
	var p corev1.Pod
	if err := s.Env.Client.Get(t.Context(), client.ObjectKey{Namespace: s.NS, Name: pod}, &p); err != nil {
		t.Fatal(err)
	}
	evicted := time.Now()
	if err := s.Env.Client.Delete(t.Context(), &p); err != nil {
		t.Fatal(err)
	}
	// Once released, the pod garbage collector removes the pod of a lost node and Volcano
	// recreates it under the same name: the original is released when it lacks the finalizer or is
	// gone.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var cur corev1.Pod
		err := s.Env.Client.Get(t.Context(), client.ObjectKeyFromObject(&p), &cur)
		if apierrors.IsNotFound(err) || (err == nil && (cur.UID != p.UID || !controllerutil.ContainsFinalizer(&cur, tracking.PodFinalizer))) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod of a lost node not released within 2 minutes (%v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("released %s after the eviction", time.Since(evicted))

	all, err := s.Records.LogObjects(t.Context(), string(p.OwnerReferences[0].UID))
	var logs []record.LogObject
	for _, l := range all {
		if l.PodUID == string(p.UID) {
			logs = append(logs, l)
		}
	}
	if err != nil || len(logs) != 1 || logs[0].State != record.LogStored {
		t.Fatalf("log rows of the lost pod %+v (%v), want the captured part stored", logs, err)
	}
	got, _ := s.ReadLog(t, logs[0].ObjectKey)
	if len(got) < 20<<10 || !bytes.HasPrefix(written, got) {
		t.Errorf("archived %d bytes, want a prefix of the %d written, at least the 20 KiB written before the loss", len(got), len(written))
	}
	var g []record.Gap
	for _, gap := range s.Gaps(t, string(p.OwnerReferences[0].UID)) {
		if gap.PodUID == string(p.UID) {
			g = append(g, gap)
		}
	}
	if len(g) != 1 || g[0].Reason != record.GapNodeLost || g[0].After.IsZero() || !strings.Contains(g[0].Detail, node) {
		t.Errorf("gaps %+v, want one: the rest lost with node %s, after the last line captured", g, node)
	}
}

// TestCaptureCrashLoop: a container restarts 5 times within 10 s; every run's log is archived
// under its own instance, byte-exact, or, where the capture fell a run behind, what it read of
// the run from its start with an "another run served" gap ("restarted again before read" two
// runs behind): no run's log holds another run's bytes, and nothing is missing without a gap.
// The restarts are immediate, as no kubelet's after the first (it backs off 10 s and more), and
// a status gives a run's start in whole seconds: a run's read opened after the next run began is
// served the next run's lines, which the archiver cannot tell from its own, and the previous file
// holds only the last dead run. Starved of CPU for
// a run's 1.5 s (make test's load: in two of four runs on 2026-11-29, one a run behind, one two),
// the capture honestly records the gap, even when it then reads the run whole.
func TestCaptureCrashLoop(t *testing.T) {
	t.Parallel()
	checkCrashLoop(t)
}

// TestCaptureCrashLoopBackOff is TestCaptureCrashLoop with each restart backing off 2 s, as a
// kubelet does in CrashLoopBackOff: between runs the status shows the container Waiting with the
// run that died as its last state, and pods/log serves that run both as previous and as current.
// A read by name in that window must not file one run's bytes under another run's instance.
// It failed before the testbed's model of a kubelet was fixed (kwok/stages.yaml's pod-ready):
// in back-off the model set the container Running with restartCount 0, counts went back, a second
// capture of run 0 followed later runs' output, and its write replaced run 0's stored log (its
// row's sha256 no longer matched), while runs 3 and 4 went missing behind "rotated before read"
// gaps. No kubelet counts back; a final log is now written once whatever the status says
// (TestFinalLogWrittenOnce).
func TestCaptureCrashLoopBackOff(t *testing.T) {
	t.Parallel()
	checkCrashLoop(t, testbed.BackOff(2*time.Second))
}

// checkCrashLoop runs TestCaptureCrashLoop's job, with extra options for its task, and checks that
// every run's log is archived under its own instance, or what was read of it with a gap.
func checkCrashLoop(t *testing.T, opts ...testbed.PodOption) {
	t.Helper()
	s := stack.NewRig(t, objstore.BackendS3)
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	opts = append([]testbed.PodOption{testbed.Restarts(5, 1500*time.Millisecond)}, opts...)
	job := testbed.Job(s.NS, "crashloop").Task("w", 1, []string{"main"}, opts...).Obj()
	pod := testbed.PodName(job.Name, "w", 0)
	var runs [][]testbed.Chunk
	for run := range 6 {
		runs = append(runs, stack.SteadyOutput(fmt.Sprintf("run %d", run), 3, 2<<10))
	}
	rt.Run(t, s.NS, pod, map[string]testbed.Output{"main": {Runs: runs}})
	stack.CreateAs(t, s.Env, "erin", job)
	j := s.WaitArchived(t, job, 3*time.Minute)
	// Runs 4 and 5 are read whole whatever the capture's delay: the model keeps the last run's
	// file as current and run 4's as previous until the pod goes. An earlier run's read may be a
	// run behind, and then short.
	gapped := map[int32]record.Gap{}
	for _, g := range s.Gaps(t, string(j.UID)) {
		if (g.Reason != record.GapOtherRun && g.Reason != record.GapRestarted) || g.Container != "main" || g.Run < 0 || g.Run > 4 {
			t.Errorf("gap %+v, want none but %q or %q, of runs 0 to 4 of main", g, record.GapOtherRun, record.GapRestarted)
		}
		gapped[g.Run] = g
	}
	for run := range int32(6) {
		instance := record.InstanceCurrent
		if run < 5 {
			instance = record.PreviousInstance(run + 1)
		}
		written := rt.Written(s.NS, pod, "main", run)
		if !bytes.Equal(written, testbed.Bytes(runs[run])) {
			t.Errorf("run %d wrote %d bytes, the test meant %d", run, len(written), len(testbed.Bytes(runs[run])))
		}
		row := logRow(t, s, string(j.UID), "main", instance)
		if _, ok := gapped[run]; !ok || run >= 4 {
			s.CheckLog(t, row, written)
			continue
		}
		// What was stored is the run's own, from its start, whole lines, and the row says so.
		switch row.State {
		case record.LogStored:
			got, _ := s.ReadLog(t, row.ObjectKey)
			if !bytes.HasPrefix(written, got) || (len(got) > 0 && got[len(got)-1] != '\n') {
				t.Errorf("run %d (%s) with a gap: stored %d bytes, want whole lines it wrote from its start, up to the %d", run, instance, len(got), len(written))
			}
			s.CheckLog(t, row, got)
			t.Logf("run %d (%s): gap %q (%s); %d of %d bytes stored", run, instance, gapped[run].Reason, gapped[run].Detail, len(got), len(written))
		case record.LogUnavailable:
			if row.Reason == "" {
				t.Errorf("run %d (%s): unavailable without a reason", run, instance)
			}
		default:
			t.Errorf("run %d (%s) with a gap: state %s, want stored or unavailable", run, instance, row.State)
		}
	}
	jr, err := s.Records.Job(t.Context(), string(j.UID))
	if want := map[bool]record.ArchiveState{false: record.ArchiveArchived, true: record.ArchiveReleased}[len(gapped) > 0]; err != nil || jr.ArchiveState != want {
		t.Errorf("job row %s (%v) with %d gaps, want %s", jr.ArchiveState, err, len(gapped), want)
	}
}

// TestCaptureFallbackMarksPossiblyRotated: the archiver is down for a job's whole life on a node
// that rotates logs at 64 KiB. Started afterwards, it can read only the current file, which holds
// more than the rotation size: the log is stored as read, with a "possibly rotated before read"
// gap before its first line, and the job is released with that reason, never archived.
func TestCaptureFallbackMarksPossiblyRotated(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendFS, "--node-log-max-size=65536")
	s.Proc.Stop()
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{MaxSize: 64 << 10, MaxFiles: 2})
	// Rotations, then one chunk bigger than the rotation size, alone in the last file (the
	// kubelet checks sizes every 10 s, so its files overshoot).
	out := append(stack.SteadyOutput("early", 40, 4<<10), stack.SteadyOutput("last", 1, 70<<10)...)
	job, pod := writingJob(t, s, rt, "unwatched", "3s", out, 20*time.Millisecond)
	stack.WaitPhase(t, s.Env, job, batchv1alpha1.Completed, 2*time.Minute)
	s.Start(t)
	j := s.WaitArchived(t, job, 2*time.Minute)
	wroteAll(t, s, rt, pod, out)
	row := logRow(t, s, string(j.UID), "main", record.InstanceCurrent)
	s.CheckLog(t, row, out[len(out)-1].Data) // the current file: the last chunk
	g := s.Gaps(t, string(j.UID))
	if len(g) != 1 || g[0].Reason != record.GapMaybeRotated || !g[0].After.IsZero() || g[0].Before.IsZero() {
		t.Errorf("gaps %+v, want one %q gap before the first line read", g, record.GapMaybeRotated)
	}
	jr, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil || jr.ArchiveState != record.ArchiveReleased || !strings.Contains(jr.ReleaseReason, string(record.GapMaybeRotated)) {
		t.Errorf("job row %s %q (%v), want released with the possible rotation as reason", jr.ArchiveState, jr.ReleaseReason, err)
	}
	s.ExpectEvent(t, "LogIncomplete")
}

// TestCaptureSlowLog: a container writes for several times --store-transfer-timeout. Each stage
// has its own bound (opening a stream, each segment's upload, each part of the assembly) and
// the stream itself has none, so the log is archived whole, never failed and re-streamed.
func TestCaptureSlowLog(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3, "--store-transfer-timeout=2s", "--capture-segment-age=1s")
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	out := stack.SteadyOutput("slow", 20, 2<<10)
	job, pod := writingJob(t, s, rt, "slow", "10s", out, 400*time.Millisecond)
	j := s.WaitArchived(t, job, 2*time.Minute)
	written := wroteAll(t, s, rt, pod, out)
	s.CheckLog(t, logRow(t, s, string(j.UID), "main", record.InstanceCurrent), written)
	if g := s.Gaps(t, string(j.UID)); len(g) != 0 {
		t.Errorf("gaps %+v, want none", g)
	}
}

// TestCaptureLeavesAnotherLogUnderItsName: a run's final log is written once. An object already
// under its name, of unknown origin, is left as it is; the run is recorded lost with the reason
// ('name held by another log'), and its job is released with it, not held: writing again cannot
// help. Before a final log was written once, the write replaced the object; with it, before the
// conflict was recorded, it was retried without end when found at assembly.
func TestCaptureLeavesAnotherLogUnderItsName(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3)
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	out := stack.SteadyOutput("own", 5, 1<<10)
	job, pod := writingJob(t, s, rt, "taken", "8s", out, 100*time.Millisecond)
	var j batchv1alpha1.Job
	var p corev1.Pod
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return s.Env.Client.Get(ctx, client.ObjectKey{Namespace: s.NS, Name: pod}, &p) == nil &&
			s.Env.Client.Get(ctx, client.ObjectKeyFromObject(job), &j) == nil, nil
	}); err != nil {
		t.Fatalf("pod %s not created: %v", pod, err)
	}
	layout := archive.Layout{Prefix: "archive"}
	key := stack.Must(layout.PodLog(archive.JobRef{Namespace: s.NS, Name: job.Name, UID: string(j.UID)}, pod, string(p.UID), "main", record.InstanceCurrent))
	other := stack.GzipBytes(t, []byte("another log, never recorded\n"))
	if err := s.Store.Put(t.Context(), key, bytes.NewReader(other), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	released := s.WaitArchived(t, job, 3*time.Minute)
	wroteAll(t, s, rt, pod, out)
	if got, _ := s.ReadLog(t, key); !bytes.Equal(got, []byte("another log, never recorded\n")) {
		t.Errorf("the object under %s holds %q, want the other log left as it was", key, got)
	}
	row := logRow(t, s, string(released.UID), "main", record.InstanceCurrent)
	if row.State != record.LogUnavailable || !strings.Contains(row.Reason, string(record.GapNameTaken)) {
		t.Errorf("log row %s %q, want unavailable: %s", row.State, row.Reason, record.GapNameTaken)
	}
	if gaps := s.Gaps(t, string(released.UID)); len(gaps) != 1 || gaps[0].Reason != record.GapNameTaken {
		t.Errorf("gaps %+v, want one %q", gaps, record.GapNameTaken)
	}
	if jr, err := s.Records.Job(t.Context(), string(released.UID)); err != nil || jr.ArchiveState != record.ArchiveReleased ||
		!strings.Contains(jr.ReleaseReason, string(record.GapNameTaken)) {
		t.Errorf("job row %s %q (%v), want released for the name held by another log", jr.ArchiveState, jr.ReleaseReason, err)
	}
}
