package apiserver

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/verify"
)

// verifyREST serves archivedjobs/verify: the job's archive re-read from the store and compared
// with the database by verify.Job, the verifier of `archiver logs verify`, on every get. It reads
// every object of the job, as the log subresource reads one: it is authorized as a log read.
type verifyREST struct {
	jobs  *jobsREST
	store objstore.Store
	// slots bounds the verifications running at once, server-wide: each re-reads a whole
	// archive, and one tenant's repeated requests must not take the store's bandwidth from
	// everyone's log reads. A request finding none free is refused (429), not queued.
	slots chan struct{}
}

// maxVerifications is how many verifications run at once (each with verify.Job's own bounded
// workers).
const maxVerifications = 2

func newVerifyREST(jobs *jobsREST, store objstore.Store) *verifyREST {
	return &verifyREST{jobs: jobs, store: store, slots: make(chan struct{}, maxVerifications)}
}

var _ rest.Getter = (*verifyREST)(nil)

func (r *verifyREST) New() runtime.Object { return &v1alpha1.ArchivedJobVerification{} }
func (r *verifyREST) Destroy()            {}

// Get verifies the job named name (the latest of that name, or its UID) and returns the
// findings, or refuses with TooManyRequests while maxVerifications run. A job whose archive the records place in another store than the server's is an
// internal error: the server cannot verify it, which must not read as missing objects.
func (r *verifyREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	default:
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("%d verifications are running: try again shortly", cap(r.slots)), 5)
	}
	job, err := r.jobs.find(ctx, genericapirequest.NamespaceValue(ctx), name)
	if err != nil {
		return nil, err
	}
	rep, err := verify.Job(ctx, r.jobs.records, r.store, job.UID, verify.JobOptions{})
	var loc *verify.LocationError
	switch {
	case errors.As(err, &loc):
		return nil, internal(fmt.Errorf("verify from this server's store: %w", err))
	case err != nil:
		return nil, internal(err)
	}
	out := VerificationOf(rep)
	return &out, nil
}

// VerificationOf is the API's form of a report of verify.Job (kubectl-jobvault turns it back
// into one to print it as `archiver logs verify` does).
func VerificationOf(rep verify.JobReport) v1alpha1.ArchivedJobVerification {
	out := v1alpha1.ArchivedJobVerification{
		ObjectMeta:   metav1.ObjectMeta{Name: rep.Job.Name, Namespace: rep.Job.Namespace, UID: types.UID(rep.Job.UID)},
		ArchiveState: string(rep.ArchiveState),
		Location:     rep.Location,
		Logs:         int32(rep.Logs),
		Stored:       int32(rep.Stored),
		Unavailable:  int32(rep.Unavailable),
		Unreferenced: rep.Unreferenced,
	}
	for _, f := range rep.Findings {
		out.Findings = append(out.Findings, v1alpha1.VerificationFinding{Kind: string(f.Kind), Item: f.Item, Key: f.Key, Detail: f.Detail})
	}
	for _, g := range rep.Gaps {
		out.Gaps = append(out.Gaps, v1alpha1.VerificationGap{PodUID: g.PodUID, Container: g.Container, Run: g.Run,
			After: metaTime(g.After), Before: metaTime(g.Before), Reason: g.Reason, Detail: g.Detail})
	}
	return out
}
