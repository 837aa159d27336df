package plugin

import (
	"net/url"
	"time"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// The timeline's geometry, in SVG user units.
const (
	timelineWidth    = 760
	timelineMinPhase = 70 // a phase's least width, so that a short one stays readable
)

// timeline is a job's phases as bars along its life, drawn as inline SVG.
type timeline struct {
	Width    int
	Segments []segment
	From, To string
}

// segment is one phase, from its transition to the next.
type segment struct {
	Phase, Reason, From, To string
	X, Width                int
}

// timelineOf lays out the job's phases: each gets timelineMinPhase, and the rest of the width in
// proportion to how long the job stayed in it. The last phase lasts until the job finished, or
// until now while it has not.
func timelineOf(job *v1alpha1.ArchivedJob, now time.Time) *timeline {
	tr := job.Status.Transitions
	if len(tr) == 0 {
		return nil
	}
	end := now
	if f := job.Status.FinishedAt; f != nil {
		end = f.Time
	}
	if last := tr[len(tr)-1].Time.Time; end.Before(last) {
		end = last
	}
	durations := make([]time.Duration, len(tr))
	var total time.Duration
	for i := range tr {
		next := end
		if i+1 < len(tr) {
			next = tr[i+1].Time.Time
		}
		durations[i] = max(next.Sub(tr[i].Time.Time), 0)
		total += durations[i]
	}
	minW := timelineMinPhase
	if minW*len(tr) > timelineWidth {
		minW = timelineWidth / len(tr)
	}
	spare := timelineWidth - minW*len(tr)
	t := &timeline{Width: timelineWidth, From: ago(tr[0].Time.Time), To: ago(end)}
	x := 0
	for i, p := range tr {
		w := minW + spare/len(tr)
		if total > 0 {
			w = minW + int(float64(spare)*float64(durations[i])/float64(total))
		}
		to := end
		if i+1 < len(tr) {
			to = tr[i+1].Time.Time
		}
		t.Segments = append(t.Segments, segment{Phase: p.Phase, Reason: p.Reason, From: ago(p.Time.Time), To: ago(to), X: x, Width: w})
		x += w
	}
	return t
}

// podView is a pod of the job page, with a link to each run's log.
type podView struct {
	v1alpha1.ArchivedPod
	Containers []containerView
}

// containerView is a container with its runs and gaps.
type containerView struct {
	v1alpha1.ArchivedContainer
	Runs []runView
}

// runView is one run's log: its state, and the link to read it.
type runView struct {
	v1alpha1.LogInstance
	Gaps []v1alpha1.LogGap
	Link string
}

// podViews are the job's pods as the job page lists them.
func podViews(job *v1alpha1.ArchivedJob) []podView {
	base := "/jobs/" + url.PathEscape(job.Namespace) + "/" + url.PathEscape(string(job.UID)) + "/log?"
	var out []podView
	for _, p := range job.Status.Pods {
		pv := podView{ArchivedPod: p}
		for _, c := range p.Containers {
			cv := containerView{ArchivedContainer: c}
			for _, i := range c.Instances {
				run := runNumber(c, i.Name)
				rv := runView{LogInstance: i, Link: base + logRef{Pod: p.UID, Container: c.Name, Instance: i.Name}.query().Encode()}
				for _, g := range c.Gaps {
					if g.Run == run {
						rv.Gaps = append(rv.Gaps, g)
					}
				}
				cv.Runs = append(cv.Runs, rv)
			}
			pv.Containers = append(pv.Containers, cv)
		}
		out = append(out, pv)
	}
	return out
}
