package policy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/testbed"
)

const submitter = "jobvault-submitter"

// groupsJSON is the jobvault.io/submitter-groups value of u's requests, as the webhook writes it:
// the groups the API server authenticates u with (SelfSubjectReview: the certificate's order, and
// system:authenticated), encoded by json.Marshal.
func groupsJSON(t *testing.T, u user) string {
	t.Helper()
	review := &authenticationv1.SelfSubjectReview{}
	if err := as(t, u).Create(t.Context(), review); err != nil {
		t.Fatalf("SelfSubjectReview as %s: %v", u.name, err)
	}
	b, err := json.Marshal(review.Status.UserInfo.Groups)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func jobWith(ns, name string, annotations map[string]string) *batchv1alpha1.Job {
	j := testbed.Job(ns, name).Task("main", 1, []string{"main"}).Obj()
	j.Annotations = annotations
	return j
}

// While the webhook is down (it fails open for VcJobs), a tenant cannot claim another submitter or
// other groups: at CREATE the annotations must be the request's. A true claim passes; so does a
// job without them (the archiver records the submitter as unknown). With the webhook up, whatever
// the manifest says is overwritten with the request's user before the policy looks.
func TestSubmitterIsTheCreator(t *testing.T) {
	t.Parallel()
	env := policies(t)
	down := env.Namespace(t) // no webhook: as while it is unavailable
	now := time.Now().UTC().Format(time.RFC3339)
	for _, c := range []struct {
		name        string
		annotations map[string]string
		want        []string
	}{
		{"another user", map[string]string{tracking.SubmitterAnnotation: "bob"},
			[]string{"jobvault.io/submitter of VcJob " + down + "/forged must be the user creating it, alice"}},
		{"other groups", map[string]string{tracking.SubmitterAnnotation: "alice", tracking.SubmitterGroupsAnnotation: `["admins"]`},
			[]string{"jobvault.io/submitter-groups of VcJob " + down + "/forged must be the groups of the user creating it, " + groupsJSON(t, tenant)}},
		{"groups without system:authenticated", map[string]string{tracking.SubmitterGroupsAnnotation: `["team-a"]`},
			[]string{"must be the groups of the user creating it"}},
		{"a malformed admission time", map[string]string{tracking.AdmittedAtAnnotation: "yesterday"},
			[]string{"jobvault.io/admitted-at of VcJob " + down + "/forged must be an RFC 3339 time"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectDenied(t, as(t, tenant).Create(t.Context(), jobWith(down, "forged", c.annotations)), submitter, c.want...)
		})
	}
	t.Run("the truth", func(t *testing.T) {
		j := jobWith(down, "true-claim", map[string]string{tracking.SubmitterAnnotation: "alice",
			tracking.SubmitterGroupsAnnotation: groupsJSON(t, tenant), tracking.AdmittedAtAnnotation: now})
		if err := as(t, tenant).Create(t.Context(), j); err != nil {
			t.Errorf("tenant creates a job with true submitter annotations: %v", err)
		}
	})
	t.Run("nothing", func(t *testing.T) {
		if err := as(t, tenant).Create(t.Context(), jobWith(down, "unstamped", nil)); err != nil {
			t.Errorf("tenant creates a job without submitter annotations: %v", err)
		}
	})
	t.Run("the webhook overwrites a claim", func(t *testing.T) {
		up := webhookNamespace(t, env)
		j := jobWith(up, "claims-bob", map[string]string{tracking.SubmitterAnnotation: "bob", tracking.SubmitterGroupsAnnotation: `["admins"]`})
		if err := as(t, tenant).Create(t.Context(), j); err != nil {
			t.Fatalf("tenant creates a job claiming bob through the webhook: %v", err)
		}
		a := get(t, j).Annotations
		if a[tracking.SubmitterAnnotation] != "alice" || a[tracking.SubmitterGroupsAnnotation] != groupsJSON(t, tenant) {
			t.Errorf("stored submitter %q groups %q, want alice %s", a[tracking.SubmitterAnnotation], a[tracking.SubmitterGroupsAnnotation], groupsJSON(t, tenant))
		}
	})
}

// The policy encodes the request's groups exactly as the webhook's json.Marshal does, for every
// character Go escapes, so a job created through the webhook by a user with such groups is admitted;
// and it compares exactly, so an equivalent JSON of the same groups is refused.
func TestSubmitterGroupsEncodedAsGo(t *testing.T) {
	t.Parallel()
	env := policies(t)
	dana := user{name: "dana", groups: []string{"R&D", `CORP\ml`, `say "hi"`, "<team>", "tab\tsep", "new\nline", "cr\rx",
		"back\bspace", "form\ffeed", "bell\x07", "unit\x1fsep", "del\x7f", "line\u2028sep", "para\u2029sep", "ünïcödé ✓", "a,b", ""}}
	want := groupsJSON(t, dana)
	if !strings.Contains(want, `R\u0026D`) || !strings.Contains(want, `\u2028`) || !strings.Contains(want, `\u0007`) || !strings.Contains(want, `\b`) {
		t.Fatalf("json.Marshal wrote %s: not the escapes this test is about", want)
	}

	t.Run("through the webhook", func(t *testing.T) {
		up := webhookNamespace(t, env)
		j := jobWith(up, "odd-groups", nil)
		if err := as(t, dana).Create(t.Context(), j); err != nil {
			t.Fatalf("create through the webhook with groups %q: %v", dana.groups, err)
		}
		if got := get(t, j).Annotations[tracking.SubmitterGroupsAnnotation]; got != want {
			t.Errorf("stored groups %s, want %s", got, want)
		}
	})
	down := env.Namespace(t)
	t.Run("exact", func(t *testing.T) {
		j := jobWith(down, "exact", map[string]string{tracking.SubmitterGroupsAnnotation: want})
		if err := as(t, dana).Create(t.Context(), j); err != nil {
			t.Errorf("create with json.Marshal's encoding of the groups: %v", err)
		}
	})
	t.Run("equivalent", func(t *testing.T) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		var groups []string
		if err := json.Unmarshal([]byte(want), &groups); err != nil {
			t.Fatal(err)
		}
		if err := enc.Encode(groups); err != nil {
			t.Fatal(err)
		}
		unescaped := strings.TrimSuffix(b.String(), "\n")
		if unescaped == want {
			t.Fatalf("no other encoding of %s", want)
		}
		j := jobWith(down, "equivalent", map[string]string{tracking.SubmitterGroupsAnnotation: unescaped})
		expectDenied(t, as(t, dana).Create(t.Context(), j), submitter, "must be the groups of the user creating it")
	})
}

// After creation the submitter annotations are immutable for everyone: no change, no removal, and
// no adding them to a job created without them.
func TestSubmitterImmutable(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ns := webhookNamespace(t, env)
	job, _ := runningJob(t, tenant, ns, "stamped")
	for _, c := range []struct {
		who    user
		change func(client.Object)
		want   string
	}{
		{tenant, setAnnotations(map[string]string{tracking.SubmitterAnnotation: "bob"}),
			"jobvault.io/submitter of VcJob " + ns + "/stamped cannot be added, changed or removed after creation (by alice or anyone)"},
		{tenant, func(o client.Object) {
			a := o.GetAnnotations()
			delete(a, tracking.SubmitterGroupsAnnotation)
			o.SetAnnotations(a)
		}, "jobvault.io/submitter-groups of VcJob"},
		{operator, setAnnotations(map[string]string{tracking.AdmittedAtAnnotation: "2020-01-01T00:00:00Z"}), "jobvault.io/admitted-at of VcJob"},
		{clusterAd, setAnnotations(map[string]string{tracking.SubmitterAnnotation: "rita"}), "(by rita or anyone)"},
		{archiver, setAnnotations(map[string]string{tracking.SubmitterAnnotation: "nobody"}), "(by " + archiver.name + " or anyone)"},
	} {
		t.Run(c.who.name, func(t *testing.T) {
			before := get(t, job.DeepCopy())
			expectDenied(t, patchAs(t, c.who, job, c.change), submitter, c.want)
			unchanged(t, env, before)
		})
	}
	t.Run("added later", func(t *testing.T) {
		down := env.Namespace(t)
		j := jobWith(down, "unstamped", nil)
		if err := as(t, tenant).Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
		before := get(t, j)
		expectDenied(t, patchAs(t, tenant, j, setAnnotations(map[string]string{tracking.SubmitterAnnotation: "alice"})), submitter,
			"jobvault.io/submitter of VcJob "+down+"/unstamped cannot be added")
		unchanged(t, env, before)
	})
}
