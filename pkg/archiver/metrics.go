package archiver

import "github.com/jobvault/jobvault/pkg/metrics"

// The archiver's series, defined and registered in pkg/metrics (SetupWithManager registers them),
// under short names within this package.
var (
	jobsArchivedTotal        = metrics.JobsArchivedTotal
	podsArchivedTotal        = metrics.PodsArchivedTotal
	logBytesArchivedTotal    = metrics.LogBytesArchivedTotal
	transitionsRecordedTotal = metrics.TransitionsRecordedTotal
	archiveFailuresTotal     = metrics.ArchiveFailuresTotal
	releasesIncompleteTotal  = metrics.ReleasesIncompleteTotal
	logGapsTotal             = metrics.LogGapsTotal
	captureLagSeconds        = metrics.CaptureLagSeconds
	followReopensTotal       = metrics.FollowReopensTotal
	jobsBackstoppedTotal     = metrics.JobsBackstoppedTotal
	resweepEnqueuedTotal     = metrics.ResweepEnqueuedTotal
	releaseLatencySeconds    = metrics.ReleaseLatencySeconds
	finalizeStepSeconds      = metrics.FinalizeStepSeconds
	runsClaimedTotal         = metrics.RunsClaimedTotal
	runsTakenOverTotal       = metrics.RunsTakenOverTotal
)

// Values of the kind label of the held-finalizer gauges and of releases_incomplete_total.
const (
	kindJob = metrics.KindJob
	kindPod = metrics.KindPod
)
