package record

import (
	"cmp"
	"fmt"
	"strings"
)

// NeverStarted is the reason of the log of a container that never started: there was nothing to
// archive, so it does not make an archive incomplete.
const NeverStarted = "the container never started"

// IncompleteReason says why an archive of these pods and logs is incomplete, or "" if it is
// complete: the operator's release if any, pods not archived (orphaned pods still running, say),
// then the logs that could not be read and the gaps, counted by reason. cause is the metric label
// of the first of them.
func IncompleteReason(operator string, pods []Pod, logs []LogObject, gaps []Gap) (reason, cause string) {
	var parts []string
	if operator != "" {
		parts, cause = append(parts, operator), "operator"
	}
	pending := 0
	for _, p := range pods {
		if p.ArchiveState != ArchiveArchived && p.ArchiveState != ArchiveReleased {
			pending++
		}
	}
	if pending > 0 {
		parts = append(parts, fmt.Sprintf("%d pod(s) not archived when the job was finalized", pending))
		cause = cmp.Or(cause, "pods")
	}
	var unavailable []string
	for _, l := range logs {
		if l.State == LogUnavailable && l.Reason != NeverStarted {
			kind, _, _ := strings.Cut(l.Reason, ": ")
			unavailable = append(unavailable, kind)
		}
	}
	if len(unavailable) > 0 {
		parts = append(parts, fmt.Sprintf("%d log(s) unavailable: %s", len(unavailable), countReasons(unavailable)))
		cause = cmp.Or(cause, "unavailable")
	}
	if len(gaps) > 0 {
		kinds := make([]string, len(gaps))
		for i, g := range gaps {
			kinds[i] = string(g.Reason)
		}
		parts = append(parts, fmt.Sprintf("%d gap(s) in logs: %s", len(gaps), countReasons(kinds)))
		cause = cmp.Or(cause, "gap")
	}
	return strings.Join(parts, "; "), cause
}

// countReasons lists each distinct reason once, with its count, in the order first seen.
func countReasons(reasons []string) string {
	by := map[string]int{}
	var order []string
	for _, r := range reasons {
		if by[r] == 0 {
			order = append(order, r)
		}
		by[r]++
	}
	for i, r := range order {
		order[i] = fmt.Sprintf("%d %s", by[r], r)
	}
	return strings.Join(order, ", ")
}

// WithReason adds another reason why an archive is incomplete, of metric label cause, to reason
// (whose label is causeWas); the first reason's label stays.
func WithReason(reason, causeWas, more, cause string) (string, string) {
	if more == "" {
		return reason, causeWas
	}
	if reason == "" {
		return more, cause
	}
	return reason + "; " + more, causeWas
}
