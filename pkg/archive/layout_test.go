package archive

import (
	"errors"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// TestLayoutRejectsTraversal: every key component a tenant can choose (through an owner
// reference, or a name the API server did not validate) is refused unless it is exactly one path
// segment; nothing is resolved or cleaned up into another job's directory.
func TestLayoutRejectsTraversal(t *testing.T) {
	l := Layout{Prefix: "archive"}
	good := JobRef{Namespace: "ns-a", Name: "train", UID: "u1"}
	for name, tc := range map[string]struct {
		job                              JobRef
		pod, podUID, container, instance string
	}{
		"job name with ..":     {job: JobRef{Namespace: "ns-a", Name: "../victim-ns/victim-job", UID: "u1"}},
		"job name ..":          {job: JobRef{Namespace: "ns-a", Name: "..", UID: "u1"}},
		"job name .":           {job: JobRef{Namespace: "ns-a", Name: ".", UID: "u1"}},
		"job name with slash":  {job: JobRef{Namespace: "ns-a", Name: "a/b", UID: "u1"}},
		"empty job name":       {job: JobRef{Namespace: "ns-a", Name: "", UID: "u1"}},
		"job uid with ..":      {job: JobRef{Namespace: "ns-a", Name: "train", UID: "../../x"}},
		"job uid with NUL":     {job: JobRef{Namespace: "ns-a", Name: "train", UID: "u\x001"}},
		"empty job uid":        {job: JobRef{Namespace: "ns-a", Name: "train"}},
		"namespace ..":         {job: JobRef{Namespace: "..", Name: "train", UID: "u1"}},
		"namespace with slash": {job: JobRef{Namespace: "a/b", Name: "train", UID: "u1"}},
		"job name not UTF-8":   {job: JobRef{Namespace: "ns-a", Name: "\xff", UID: "u1"}},
		"job name too long":    {job: JobRef{Namespace: "ns-a", Name: strings.Repeat("a", 300), UID: "u1"}},
		"pod ..":               {job: good, pod: "..", podUID: "p1", container: "main", instance: record.InstanceCurrent},
		"pod with slash":       {job: good, pod: "x/../../y", podUID: "p1", container: "main", instance: record.InstanceCurrent},
		"pod uid ..":           {job: good, pod: "w-0", podUID: "..", container: "main", instance: record.InstanceCurrent},
		"pod uid with newline": {job: good, pod: "w-0", podUID: "p\n1", container: "main", instance: record.InstanceCurrent},
		"container with slash": {job: good, pod: "w-0", podUID: "p1", container: "../main", instance: record.InstanceCurrent},
		"container with a dot": {job: good, pod: "w-0", podUID: "p1", container: "main.previous-1", instance: record.InstanceCurrent},
		"empty container":      {job: good, pod: "w-0", podUID: "p1", container: "", instance: record.InstanceCurrent},
		"instance with slash":  {job: good, pod: "w-0", podUID: "p1", container: "main", instance: "x/y"},
		"instance not ours":    {job: good, pod: "w-0", podUID: "p1", container: "main", instance: ".."},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.pod == "" && tc.container == "" {
				for what, f := range map[string]func(JobRef) (string, error){"JobDir": l.JobDir, "JobObject": l.JobObject, "Manifest": l.Manifest} {
					if key, err := f(tc.job); !errors.Is(err, ErrInvalidComponent) {
						t.Errorf("%s(%+v) = %q, %v; want ErrInvalidComponent", what, tc.job, key, err)
					}
				}
				tc.pod, tc.podUID, tc.container, tc.instance = "w-0", "p1", "main", record.InstanceCurrent
			}
			if key, err := l.PodLog(tc.job, tc.pod, tc.podUID, tc.container, tc.instance); !errors.Is(err, ErrInvalidComponent) {
				t.Errorf("PodLog = %q, %v; want ErrInvalidComponent", key, err)
			}
			if tc.instance == record.InstanceCurrent {
				if key, err := l.Segment(tc.job, tc.pod, tc.podUID, tc.container, 0, 1); !errors.Is(err, ErrInvalidComponent) {
					t.Errorf("Segment = %q, %v; want ErrInvalidComponent", key, err)
				}
			}
		})
	}
}

// FuzzLayout: whatever the components, a key is either refused or made of exactly the components
// given, each one path element, in place, and storable by every backend.
func FuzzLayout(f *testing.F) {
	f.Add("ns", "train", "u1", "train-w-0", "p1", "main", int32(0))
	f.Add("ns-a", "../victim-ns/victim-job", "9f1c", "w", "p", "c", int32(1))
	f.Add("..", ".", "", "a//b", "/", "x.y", int32(-1))
	f.Add("ns", "a.b", "u\x00", "p\n", "p1", "main", int32(2))
	f.Fuzz(func(t *testing.T, ns, name, uid, pod, podUID, container string, restarts int32) {
		l := Layout{Prefix: "archive/eu-1"}
		j := JobRef{Namespace: ns, Name: name, UID: uid}
		instance := record.InstanceCurrent
		if restarts > 0 {
			instance = record.PreviousInstance(restarts)
		}
		check := func(what, key string, err error, want ...string) {
			if err != nil {
				if !errors.Is(err, ErrInvalidComponent) {
					t.Fatalf("%s: error %v does not wrap ErrInvalidComponent", what, err)
				}
				return
			}
			if err := objstore.ValidateKey(key); err != nil {
				t.Fatalf("%s: key %q not storable: %v", what, key, err)
			}
			got := strings.Split(key, "/")
			want = append([]string{"archive", "eu-1", ns, name, uid}, want...)
			if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
				t.Fatalf("%s: key %q, want the elements %q", what, key, want)
			}
		}
		dir, err := l.JobDir(j)
		check("JobDir", dir, err)
		key, err := l.Manifest(j)
		check("Manifest", key, err, "manifest.json")
		key, err = l.PodLog(j, pod, podUID, container, instance)
		file := container + ".log.gz"
		if instance != record.InstanceCurrent {
			file = container + "." + instance + ".log.gz"
		}
		check("PodLog", key, err, "pods", pod, podUID, file)
		if err == nil && strings.Contains(container, ".") {
			t.Fatalf("PodLog: container %q with a dot accepted: it could collide with another's instance", container)
		}
	})
}
