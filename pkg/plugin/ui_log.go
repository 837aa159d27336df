package plugin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// Bounds of what one log page holds, whatever the log: a page is for reading, the download for
// the whole.
const (
	uiDefaultTail   = 500     // lines shown by default: the end of the log
	uiMaxViewBytes  = 4 << 20 // bytes of the log a page reads without a search
	uiMaxLineBytes  = 8 << 10 // bytes of one line shown; the rest is cut
	uiMaxMatches    = 500     // matching lines a search shows
	uiMaxSearchScan = 1 << 30 // bytes a search reads at most
)

// logLine is one line of the log page, or a gap marker between lines.
type logLine struct {
	Num       int64
	Parts     []textPart
	Match     bool
	Truncated bool
	Gap       *gapView
	time      time.Time // the line's leading RFC 3339 stamp, if it has one
}

// textPart is a piece of a line, a search hit or not.
type textPart struct {
	Text string
	Hit  bool
}

// gapView is a gap of the run shown, with where it could be placed.
type gapView struct {
	v1alpha1.LogGap
	// Where says where the gap falls when the lines cannot place it.
	Where string
}

// logView is what the log page shows of one run.
type logView struct {
	Lines       []logLine
	Search      string
	Matches     int64
	MoreMatches bool
	Tail        int64
	Cut         bool      // the view stopped at uiMaxViewBytes or uiMaxSearchScan
	Read        int64     // bytes of the log read
	Gaps        []gapView // the gaps the lines could not place
	Instance    *v1alpha1.LogInstance
}

// logPage shows a run's log: its tail (or all of it, up to uiMaxViewBytes), or the lines that
// hold a search, with the run's gaps marked where they fall.
func (v *viewer) logPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ref := logRefOf(q)
	tail, err := tailOf(q.Get("tail"))
	if err != nil {
		v.refuse(w, http.StatusBadRequest, err)
		return
	}
	job, err := v.job(r)
	if err != nil {
		v.refuse(w, http.StatusBadGateway, err)
		return
	}
	view := logView{Search: q.Get("q"), Tail: tail}
	extra := url.Values{}
	switch {
	case view.Search != "":
		extra.Set("limitBytes", strconv.Itoa(uiMaxSearchScan))
	case tail > 0:
		extra.Set("tailLines", strconv.FormatInt(tail, 10))
		extra.Set("limitBytes", strconv.Itoa(uiMaxViewBytes))
	default:
		extra.Set("limitBytes", strconv.Itoa(uiMaxViewBytes))
	}
	body, err := v.stream(r, ref, extra)
	if err != nil {
		v.refuse(w, http.StatusBadGateway, err)
		return
	}
	defer body.Close()
	if err := view.read(body); err != nil {
		v.refuse(w, http.StatusBadGateway, fmt.Errorf("read the log: %w", err))
		return
	}
	run, gaps := runOf(job, ref)
	view.Instance = run
	view.Gaps = placeGaps(&view, gaps, run != nil && view.Read == run.Bytes)
	self := ref.query()
	download := "/jobs/" + url.PathEscape(job.Namespace) + "/" + url.PathEscape(r.PathValue("name")) + "/log/download?" + self.Encode()
	v.render(w, "log", map[string]any{"Title": "Log of " + job.Name, "Job": job, "Ref": ref, "View": view,
		"Self": self, "Download": download})
}

// tailOf reads the tail option: empty is uiDefaultTail, "all" (or 0) the whole log.
func tailOf(s string) (int64, error) {
	switch s {
	case "":
		return uiDefaultTail, nil
	case "all":
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("tail %q: a number of lines, or all", s)
	}
	return n, nil
}

// read reads the log's lines into the view: all of them, or those holding the search. Memory is
// bounded by the lines kept (each cut at uiMaxLineBytes), whatever the log's size.
func (lv *logView) read(body io.Reader) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var (
		num  int64
		read int64
	)
	for {
		text, truncated, n, err := readLine(br)
		read += n
		if n > 0 {
			num++
			lv.addLine(num, text, truncated)
		}
		if errors.Is(err, io.EOF) {
			lv.Read = read
			lv.Cut = (lv.Search != "" && read >= uiMaxSearchScan) || (lv.Search == "" && read >= uiMaxViewBytes)
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// addLine keeps line num if the view shows it.
func (lv *logView) addLine(num int64, text string, truncated bool) {
	line := logLine{Num: num, Truncated: truncated, time: leadingTime(text)}
	if lv.Search == "" {
		line.Parts = []textPart{{Text: text}}
		lv.Lines = append(lv.Lines, line)
		return
	}
	parts, hit := highlight(text, lv.Search)
	if !hit {
		return
	}
	lv.Matches++
	if len(lv.Lines) >= uiMaxMatches {
		lv.MoreMatches = true
		return
	}
	line.Parts, line.Match = parts, true
	lv.Lines = append(lv.Lines, line)
}

// readLine reads one line (without its newline), kept up to uiMaxLineBytes and valid UTF-8, and
// the bytes it took of the log.
func readLine(br *bufio.Reader) (string, bool, int64, error) {
	const keep = uiMaxLineBytes + 2 // room for the line's own \r\n, trimmed below
	var (
		kept []byte
		n    int64
	)
	for {
		frag, err := br.ReadSlice('\n')
		n += int64(len(frag))
		kept = append(kept, frag[:min(max(keep-len(kept), 0), len(frag))]...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		text := strings.TrimSuffix(strings.TrimSuffix(string(kept), "\n"), "\r")
		truncated := len(text) > uiMaxLineBytes
		if truncated {
			text = text[:uiMaxLineBytes]
		}
		return strings.ToValidUTF8(text, "\uFFFD"), truncated, n, err
	}
}

// highlight splits text around the occurrences of search (case-sensitive, as grep without -i).
func highlight(text, search string) ([]textPart, bool) {
	var parts []textPart
	hit := false
	for {
		i := strings.Index(text, search)
		if i < 0 {
			break
		}
		hit = true
		if i > 0 {
			parts = append(parts, textPart{Text: text[:i]})
		}
		parts = append(parts, textPart{Text: search, Hit: true})
		text = text[i+len(search):]
	}
	if text != "" {
		parts = append(parts, textPart{Text: text})
	}
	return parts, hit
}

// leadingTime is the RFC 3339 stamp a line starts with, if any: many programs stamp their lines,
// and those stamps place a gap among them.
func leadingTime(text string) time.Time {
	word, _, _ := strings.Cut(text, " ")
	if len(word) < len("2006-01-02T15:04:05Z") || len(word) > len(time.RFC3339Nano)+6 {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, word)
	if err != nil {
		return time.Time{}
	}
	return t
}

// runOf finds the instance ref names in the job and the gaps of its run. The run of previous-N
// is N-1 (the restart count during it); the current run's is the highest previous-N's N.
func runOf(job *v1alpha1.ArchivedJob, ref logRef) (*v1alpha1.LogInstance, []v1alpha1.LogGap) {
	for _, p := range job.Status.Pods {
		if ref.Pod != "" && ref.Pod != p.Name && ref.Pod != p.UID {
			continue
		}
		for _, c := range p.Containers {
			if ref.Container != "" && ref.Container != c.Name {
				continue
			}
			run := runNumber(c, ref.Instance)
			var gaps []v1alpha1.LogGap
			for _, g := range c.Gaps {
				if g.Run == run {
					gaps = append(gaps, g)
				}
			}
			for i := range c.Instances {
				if c.Instances[i].Name == ref.Instance {
					return &c.Instances[i], gaps
				}
			}
			return nil, gaps
		}
	}
	return nil, nil
}

// runNumber is the restart count during the run instance names.
func runNumber(c v1alpha1.ArchivedContainer, instance string) int32 {
	if n, ok := strings.CutPrefix(instance, "previous-"); ok {
		if k, err := strconv.Atoi(n); err == nil {
			return int32(k - 1)
		}
	}
	var last int32
	for _, i := range c.Instances {
		if n, ok := strings.CutPrefix(i.Name, "previous-"); ok {
			if k, err := strconv.Atoi(n); err == nil && int32(k) > last {
				last = int32(k)
			}
		}
	}
	return last
}

// placeGaps inserts a marker for each gap among the view's lines where it falls: a gap from the
// run's start before the first line (when the view starts where the log does: whole, the log read
// entire, or a search), one to the run's end after the last, one between two times before the
// first line stamped at or after its end. Gaps the lines cannot place (no stamps, or
// a search that shows none of the lines around them) are returned to be listed above the log.
func placeGaps(lv *logView, gaps []v1alpha1.LogGap, whole bool) []gapView {
	var unplaced []gapView
	at := map[int][]gapView{}
	stamped := false
	for _, l := range lv.Lines {
		stamped = stamped || !l.time.IsZero()
	}
	for _, g := range gaps {
		gv := gapView{LogGap: g}
		switch {
		case g.After == nil && (whole || lv.Search != ""):
			gv.Where = "at the run's start"
			at[0] = append(at[0], gv)
		case g.Before == nil:
			gv.Where = "to the run's end"
			at[len(lv.Lines)] = append(at[len(lv.Lines)], gv)
		case stamped && g.Before != nil:
			i := len(lv.Lines)
			for j, l := range lv.Lines {
				if !l.time.IsZero() && !l.time.Before(g.Before.Time) {
					i = j
					break
				}
			}
			gv.Where = "between the lines stamped around it"
			at[i] = append(at[i], gv)
		default:
			gv.Where = "not placed: the lines carry no times"
			unplaced = append(unplaced, gv)
		}
	}
	if len(at) == 0 {
		return unplaced
	}
	lines := make([]logLine, 0, len(lv.Lines)+len(gaps))
	for i := 0; i <= len(lv.Lines); i++ {
		for _, g := range at[i] {
			lines = append(lines, logLine{Gap: &g})
		}
		if i < len(lv.Lines) {
			lines = append(lines, lv.Lines[i])
		}
	}
	lv.Lines = lines
	return unplaced
}
