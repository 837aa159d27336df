package realnode

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeRotation: a container writes 50 MiB over 30 s while the kubelet rotates its log at
// 1 MiB (about every 0.6 s), compresses older files and keeps five. The archive is byte-exact, or
// every range missing from it is a recorded gap with its reason and the job is released, never
// archived. How far the follower lagged is logged.
func TestRealNodeRotation(t *testing.T) {
	s, rn := rig(t)
	job := testbed.Job(s.NS, "rotation").Task("w", 1, []string{"main"},
		rn.Pods(map[string]testbed.Workload{"main": {Bytes: 50 << 20, For: 30 * time.Second, Lines: []int{200}}})).Obj()
	start := time.Now()
	stack.CreateAs(t, s.Env, "erin", job)
	j := s.WaitArchived(t, job, 5*time.Minute)
	t.Logf("archived %s after the job's creation", time.Since(start).Round(time.Second))
	logLag(t, s)
	uid := podUID(t, s, string(j.UID), testbed.PodName(job.Name, "w", 0))
	written := rn.Written(s.NS, uid, "main", 0)
	if len(written) != 50<<20 {
		t.Fatalf("the container wrote %d bytes, want 50 MiB", len(written))
	}
	row := logRows(t, s, string(j.UID))["main/"+record.InstanceCurrent]
	g := s.Gaps(t, string(j.UID))
	got, _ := s.ReadLog(t, row.ObjectKey)
	if bytes.Equal(got, written) {
		// The detection errs toward a gap (a capture that opened after output began cannot prove
		// it has the run's start; a jump in a stream that kept up may hide a rotation): gaps on
		// an exact archive are its false alarms, which release the job instead of archiving it.
		t.Logf("archive exact; gaps recorded all the same (false alarms): %+v", g)
		if jr, err := s.Records.Job(t.Context(), string(j.UID)); len(g) > 0 && (err != nil || jr.ArchiveState != record.ArchiveReleased) {
			t.Errorf("job row %s (%v): with gaps, want released", jr.ArchiveState, err)
		}
		return
	}
	missing, err := missingRanges(got, written)
	t.Logf("archived %d of %d bytes: missing ranges of lines %v (%v); gaps %+v", len(got), len(written), missing, err, g)
	switch {
	case err != nil && len(g) == 0:
		t.Errorf("the archive is not what was written less whole lines (%v), and no gap is recorded", err)
	case len(g) < len(missing):
		t.Errorf("%d ranges missing from the archive, %d gaps recorded", len(missing), len(g))
	}
	jr, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil || jr.ArchiveState != record.ArchiveReleased {
		t.Errorf("job row %s (%v): output missing, want released", jr.ArchiveState, err)
	}
}

// lineIndex finds the workload's line number in a line it wrote ("main run=0 stdout run <n> ...").
var lineIndex = regexp.MustCompile(`^\S+ run=\d+ std(?:out|err) \S+ (\d+) `)

// missingRanges checks that the archive is what was written less whole lines, in order and
// without duplicates, and returns the ranges of line numbers missing from it; an error says where
// it is not (a line cut, doubled or out of order).
func missingRanges(got, written []byte) ([][2]int, error) {
	wrote := bytes.SplitAfter(written, []byte("\n"))
	next := 0 // the next written line the archive may hold
	var missing [][2]int
	for i, line := range bytes.SplitAfter(got, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		m := lineIndex.FindSubmatch(line)
		if m == nil {
			return missing, fmt.Errorf("archived line %d (after the workload's line %d) is not a line the workload writes: %.80q", i, next-1, line)
		}
		n, _ := strconv.Atoi(string(m[1]))
		if n < next || n >= len(wrote) || !bytes.Equal(line, wrote[n]) {
			return missing, fmt.Errorf("archived line %d (the workload's line %d) is out of order, doubled or altered: %.80q", i, n, line)
		}
		if n > next {
			missing = append(missing, [2]int{next, n - 1})
		}
		next = n + 1
	}
	if next < len(wrote) && len(wrote[len(wrote)-1]) > 0 {
		missing = append(missing, [2]int{next, len(wrote) - 1})
	}
	return missing, nil
}

// logLag logs the archiver's capture lag: how far behind its container each followed line came.
func logLag(t *testing.T, s *stack.Rig) {
	t.Helper()
	m := s.Metrics(t)
	sum := regexp.MustCompile(`(?m)^jobvault_archiver_capture_lag_seconds_sum (\S+)`).FindStringSubmatch(m)
	count := regexp.MustCompile(`(?m)^jobvault_archiver_capture_lag_seconds_count (\S+)`).FindStringSubmatch(m)
	if sum == nil || count == nil {
		t.Logf("no capture lag observed")
		return
	}
	s1, _ := strconv.ParseFloat(sum[1], 64)
	c1, _ := strconv.ParseFloat(count[1], 64)
	var buckets []string
	for _, b := range regexp.MustCompile(`(?m)^jobvault_archiver_capture_lag_seconds_bucket\{le="([^"]+)"\} (\S+)`).FindAllStringSubmatch(m, -1) {
		buckets = append(buckets, "≤"+b[1]+"s:"+b[2])
	}
	t.Logf("capture lag: %.0f lines followed, mean %.3fs; cumulative %v", c1, s1/max(c1, 1), buckets)
}
