package record

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSourceRanges(t *testing.T) {
	seg := func(source string, bytes, total int64) Segment {
		return Segment{PodUID: "p", Container: "c", Run: 2, Source: source, Bytes: bytes, TotalBytes: total}
	}
	rng := func(source string, from, to int64) SourceRange {
		return SourceRange{PodUID: "p", Container: "c", Run: 2, Instance: "previous-3", From: from, To: to, Source: source}
	}
	for name, tc := range map[string]struct {
		segs []Segment
		want []SourceRange
	}{
		"none":             {},
		"empty segments":   {segs: []Segment{seg(CapturedByAgent, 0, 0), seg(CapturedByAPI, 0, 0)}},
		"unset is the API": {segs: []Segment{seg("", 10, 10)}, want: []SourceRange{rng(CapturedByAPI, 0, 10)}},
		"one source merges": {segs: []Segment{seg(CapturedByAgent, 10, 10), seg(CapturedByAgent, 5, 15), seg(CapturedByAgent, 0, 15)},
			want: []SourceRange{rng(CapturedByAgent, 0, 15)}},
		"hand-over": {segs: []Segment{seg(CapturedByAgent, 10, 10), seg(CapturedByAgent, 5, 15), seg(CapturedByAPI, 7, 22), seg("", 3, 25)},
			want: []SourceRange{rng(CapturedByAgent, 0, 15), rng(CapturedByAPI, 15, 25)}},
		"empty segment between": {segs: []Segment{seg(CapturedByAgent, 10, 10), seg(CapturedByAPI, 0, 10), seg(CapturedByAgent, 5, 15)},
			want: []SourceRange{rng(CapturedByAgent, 0, 15)}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, SourceRanges(tc.segs, "previous-3")); diff != "" {
				t.Errorf("SourceRanges (-want +got):\n%s", diff)
			}
		})
	}
}
