package apiserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/record"
)

// Records is what the archive API reads from the database (implemented by *db.DB, connected as
// the read-only jobvault_reader role).
type Records interface {
	inspect.Records
	inspect.JobLister
	Transitions(ctx context.Context, jobUID string) ([]record.Transition, error)
	Gaps(ctx context.Context, jobUID string) ([]record.Gap, error)
}

// jobsREST serves archivedjobs: get by name (the latest job of that name) or by UID, and list in
// pages on the database's keyset.
type jobsREST struct {
	records Records
	// cluster, when set, keeps to the jobs of that cluster (databases shared by several).
	cluster string
}

var (
	_ rest.Getter               = (*jobsREST)(nil)
	_ rest.Lister               = (*jobsREST)(nil)
	_ rest.Scoper               = (*jobsREST)(nil)
	_ rest.SingularNameProvider = (*jobsREST)(nil)
	_ rest.Storage              = (*jobsREST)(nil)
)

func (r *jobsREST) New() runtime.Object     { return &v1alpha1.ArchivedJob{} }
func (r *jobsREST) NewList() runtime.Object { return &v1alpha1.ArchivedJobList{} }
func (r *jobsREST) Destroy()                {}
func (r *jobsREST) NamespaceScoped() bool   { return true }
func (r *jobsREST) GetSingularName() string { return "archivedjob" }
func (r *jobsREST) ShortNames() []string    { return []string{"ajob"} }
func (r *jobsREST) Categories() []string    { return []string{"jobvault"} }

// Get returns the job's whole record.
func (r *jobsREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	job, err := r.find(ctx, genericapirequest.NamespaceValue(ctx), name)
	if err != nil {
		return nil, err
	}
	d := jobDetail{job: job}
	if d.transitions, err = r.records.Transitions(ctx, job.UID); err != nil {
		return nil, internal(err)
	}
	if d.pods, err = r.records.Pods(ctx, job.UID); err != nil {
		return nil, internal(err)
	}
	if d.logs, err = r.records.LogObjects(ctx, job.UID); err != nil {
		return nil, internal(err)
	}
	if d.gaps, err = r.records.Gaps(ctx, job.UID); err != nil {
		return nil, internal(err)
	}
	out := archivedJobDetail(d)
	return &out, nil
}

// find returns the job of namespace ns named name, the latest of that name, or else the job whose
// UID is name: a deleted job is addressed by its name as long as no later job took it, and by its
// UID for ever. A job named like another job's UID of the same namespace shadows it; both are the
// namespace's own.
func (r *jobsREST) find(ctx context.Context, ns, name string) (record.Job, error) {
	notFound := apierrors.NewNotFound(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.Resource).GroupResource(), name)
	if ns == "" || name == "" {
		return record.Job{}, notFound
	}
	jobs, err := inspect.FindJobs(ctx, r.records, r.cluster, ns, name)
	if err != nil {
		return record.Job{}, internal(err)
	}
	if len(jobs) > 0 {
		return jobs[len(jobs)-1], nil // oldest first
	}
	job, err := r.records.Job(ctx, name)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return record.Job{}, notFound
	case err != nil:
		return record.Job{}, internal(err)
	case job.Namespace != ns || (r.cluster != "" && job.Cluster != r.cluster):
		// Another namespace's job is not found here, whoever asks: the caller was authorized for ns.
		return record.Job{}, notFound
	}
	return job, nil
}

// List returns a page of the namespace's jobs (every namespace's without one), oldest first.
// limit and continue page on the database's keyset; without a limit a page holds at most
// db.MaxPageSize jobs and says where to continue. Field selectors: v1alpha1.FieldSelectors.
func (r *jobsREST) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	filter := db.JobFilter{Cluster: r.cluster, Namespace: genericapirequest.NamespaceValue(ctx)}
	var (
		after db.Cursor
		limit = db.MaxPageSize
	)
	if opts != nil {
		if opts.LabelSelector != nil && !opts.LabelSelector.Empty() {
			return nil, apierrors.NewBadRequest("archivedjobs cannot be selected by label: use a field selector (" + fmt.Sprint(v1alpha1.FieldSelectors) + ")")
		}
		if err := applyFieldSelector(&filter, opts); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if opts.Limit > 0 && opts.Limit < db.MaxPageSize {
			limit = int(opts.Limit)
		}
		if opts.Continue != "" {
			c, err := decodeContinue(opts.Continue)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			after = c
		}
	}
	jobs, next, err := r.records.ListJobs(ctx, filter, after, limit)
	if err != nil {
		return nil, internal(err)
	}
	list := &v1alpha1.ArchivedJobList{Items: make([]v1alpha1.ArchivedJob, 0, len(jobs))}
	for _, j := range jobs {
		list.Items = append(list.Items, archivedJob(j))
	}
	if !next.IsZero() {
		list.Continue = encodeContinue(next)
	}
	return list, nil
}

// applyFieldSelector turns the list's field selector into the database's filter. Every
// requirement must be an equality on a supported field.
func applyFieldSelector(f *db.JobFilter, opts *metainternalversion.ListOptions) error {
	if opts.FieldSelector == nil || opts.FieldSelector.Empty() {
		return nil
	}
	for _, req := range opts.FieldSelector.Requirements() {
		if req.Operator != "=" && req.Operator != "==" {
			return fmt.Errorf("field selector %s%s%s: only = is supported", req.Field, req.Operator, req.Value)
		}
		v := req.Value
		switch req.Field {
		case "metadata.namespace":
			if f.Namespace != "" && f.Namespace != v {
				return fmt.Errorf("field selector metadata.namespace=%s does not match the request's namespace %s", v, f.Namespace)
			}
			f.Namespace = v
		case "metadata.name":
			f.Name = v
		case v1alpha1.FieldSubmitter:
			f.Submitter = v
		case v1alpha1.FieldPhase:
			f.Phase = v
		case v1alpha1.FieldArchiveState:
			if !record.ArchiveState(v).Valid() {
				return fmt.Errorf("field selector %s=%s: the states are pending, archived and released", req.Field, v)
			}
			f.ArchiveState = record.ArchiveState(v)
		case v1alpha1.FieldCreatedFrom, v1alpha1.FieldCreatedBefore:
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return fmt.Errorf("field selector %s=%s: not an RFC 3339 time: %w", req.Field, v, err)
			}
			if req.Field == v1alpha1.FieldCreatedFrom {
				f.CreatedFrom = t
			} else {
				f.CreatedBefore = t
			}
		default:
			return fmt.Errorf("field selector %s not supported (supported: %v)", req.Field, v1alpha1.FieldSelectors)
		}
	}
	if f.Name != "" && f.Namespace == "" {
		return errors.New("field selector metadata.name needs a namespace")
	}
	return nil
}

// continueToken is the keyset position a continue token holds: the last job of the page.
type continueToken struct {
	CreatedAt time.Time `json:"c"`
	UID       string    `json:"u"`
}

func encodeContinue(c db.Cursor) string {
	b, _ := json.Marshal(continueToken{CreatedAt: c.CreatedAt, UID: c.UID}) // cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (db.Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var t continueToken
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || t.UID == "" {
		return db.Cursor{}, errors.New("invalid continue token: pass the one the previous page returned")
	}
	return db.Cursor{CreatedAt: t.CreatedAt, UID: t.UID}, nil
}

// internal hides a database error's text from the client (it may name tables and hosts) behind a
// generic 500; the server logs it.
func internal(err error) error {
	return apierrors.NewInternalError(err)
}

// jobColumns are the columns of kubectl get archivedjobs; priority 1 shows with -o wide.
var jobColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "The job's name."},
	{Name: "Phase", Type: "string", Description: "The job's final (latest) phase."},
	{Name: "Archive", Type: "string", Description: "pending, archived or released."},
	{Name: "Submitter", Type: "string", Description: "Who created the job."},
	{Name: "Age", Type: "string", Description: "Since the job's creation."},
	{Name: "Finished", Type: "string", Description: "Since the job finished."},
	{Name: "UID", Type: "string", Priority: 1, Description: "The job's UID: a get by UID finds a job whose name was reused."},
	{Name: "Queue", Type: "string", Priority: 1, Description: "The Volcano queue."},
	{Name: "Reason", Type: "string", Priority: 1, Description: "Why a released job has no complete archive."},
}

// ConvertToTable prints archived jobs as kubectl get shows them.
func (r *jobsREST) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: jobColumns}
	var jobs []v1alpha1.ArchivedJob
	switch o := obj.(type) {
	case *v1alpha1.ArchivedJob:
		jobs = []v1alpha1.ArchivedJob{*o}
	case *v1alpha1.ArchivedJobList:
		jobs = o.Items
		t.Continue = o.Continue
	default:
		return nil, fmt.Errorf("convert %T to a table: not an archived job", obj)
	}
	for i := range jobs {
		j := &jobs[i]
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells: []any{j.Name, orNone(j.Status.Phase), j.Status.ArchiveState, orNone(j.Spec.Submitter),
				age(&j.CreationTimestamp), age(j.Status.FinishedAt), string(j.UID), orNone(j.Spec.Queue),
				orNone(j.Status.ReleaseReason)},
			Object: runtime.RawExtension{Object: j},
		})
	}
	return t, nil
}

func age(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "<none>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
