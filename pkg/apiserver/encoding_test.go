package apiserver

import (
	"bytes"
	"compress/gzip"
	"slices"
	"testing"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/inspect"
)

func TestAcceptsGzip(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{"gzip"}, true},
		{[]string{"GZIP"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"gzip, deflate, br"}, true},
		{[]string{"br;q=1.0, gzip;q=0.5"}, true},
		{[]string{"identity", "gzip;q=0.1"}, true},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip; q=0.000"}, false},
		{[]string{"gzip;q=nope"}, false},
		{[]string{"gzip;q=2"}, false},
		{[]string{"identity"}, false},
		{[]string{"*"}, false}, // a client that names no coding gets plain bytes
		{[]string{"gzipped"}, false},
		{[]string{"deflate, br"}, false},
	} {
		if got := acceptsGzip(c.values); got != c.want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", c.values, got, c.want)
		}
	}
}

func TestWholeLog(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	l := inspect.Log{Bytes: 100}
	for _, c := range []struct {
		o    v1alpha1.ArchivedJobLogOptions
		want bool
	}{
		{v1alpha1.ArchivedJobLogOptions{}, true},
		{v1alpha1.ArchivedJobLogOptions{LimitBytes: n(100)}, true},
		{v1alpha1.ArchivedJobLogOptions{LimitBytes: n(1 << 30)}, true},
		{v1alpha1.ArchivedJobLogOptions{LimitBytes: n(99)}, false},
		{v1alpha1.ArchivedJobLogOptions{TailLines: n(1 << 30)}, false}, // a tail is counted in decompressed lines
		{v1alpha1.ArchivedJobLogOptions{Timestamps: true, Previous: true}, true},
	} {
		if got := wholeLog(&c.o, l); got != c.want {
			t.Errorf("wholeLog(%+v) = %v, want %v", c.o, got, c.want)
		}
	}
}

func TestIsOneMember(t *testing.T) {
	member := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte(s))
		_ = zw.Close()
		return b.Bytes()
	}
	one, empty := member("one line\n"), member("")
	for _, c := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"one member", one, true},
		{"an empty member", empty, true},
		{"two members", append(slices.Clone(one), one...), false},
		{"a member and an empty one", append(slices.Clone(one), empty...), false},
		{"a member and trailing bytes", append(slices.Clone(one), 0), false},
		{"a cut member", one[:len(one)-1], false},
		{"not gzip", []byte("plain text\n"), false},
		{"nothing", nil, false},
	} {
		if got := isOneMember(c.b); got != c.want {
			t.Errorf("isOneMember(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}
