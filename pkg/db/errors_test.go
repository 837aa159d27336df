package db

import (
	"testing"

	"github.com/jobvault/jobvault/pkg/record"
)

// TestValidateNamesEmptyFields pins what an empty job, pod or log object is refused with: every
// missing field, in the order the record lists them.
func TestValidateNamesEmptyFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"job", validateJob(record.Job{}), "invalid job: UID is empty; Namespace is empty; Name is empty; CreatedAt is zero"},
		{"pod", validatePod(record.Pod{}), "invalid pod: UID is empty; JobUID is empty; Namespace is empty; Name is empty; CreatedAt is zero"},
		{"pod with its job", validatePod(record.Pod{UID: "p", JobUID: "j", Namespace: "n"}), "invalid pod: Name is empty; CreatedAt is zero"},
		{"log object", validateLogObject(record.LogObject{ContainerType: record.ContainerRegular, Instance: record.InstanceCurrent}),
			`invalid log object: PodUID is empty; Container is empty; State "" is not one of stored, unavailable`},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, tc.err, tc.want)
		}
	}
}
