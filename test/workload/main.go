// Command workload is the program of the testbed's workload image (testbed.RealNode): a container
// that writes deterministic output to stdout and stderr at a chosen rate and records every byte it
// wrote, so that tests compare an archive with what the container really wrote, byte for byte.
//
// A run writes -bytes bytes over -for (all at once if 0), one chunk every -every, in lines whose
// lengths cycle through -lines: a line longer than 64 KiB is written in 64 KiB pieces, as a
// program writing through a buffer does, and a line longer than a chunk over several chunks.
// Lines go to -stream: stdout, stderr, or both (alternating). -no-final-newline drops the last
// line's newline. Then the run keeps running, idle, for -hold, and exits with -exit (only the
// first -exit-runs runs, if set). On SIGTERM it writes -term-bytes more over -term-for (the tail
// a shutdown handler writes) and exits with -term-exit.
//
// Every line says who wrote it: "<name> run=<n> <stream> <phase> <index> " then filler, so that an
// archive holding another run's bytes shows it. What the run wrote goes, in the order written, to
// <-record>/<POD_NAMESPACE>/<POD_UID>/<name>-<n>.all, and per stream to .stdout and .stderr, where
// n counts the container's runs (its restart count), found as the first free file name.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// piece is the largest single write: a longer line is written in pieces.
const piece = 64 << 10

type config struct {
	name, record, stream   string
	bytes, termBytes       int64
	lines                  []int
	every, runFor, termFor time.Duration
	hold, delay            time.Duration
	noFinalNewline         bool
	exit, termExit         int
	exitRuns               int
}

func main() {
	cfg, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	w, err := newWriter(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(2)
	}
	os.Exit(w.run(term))
}

func parse(args []string) (config, error) {
	var c config
	var lines string
	fs := flag.NewFlagSet("workload", flag.ContinueOnError)
	fs.StringVar(&c.name, "name", "main", "the container's name (in every line and the record's file names)")
	fs.StringVar(&c.record, "record", "/record", "directory of the records of what was written")
	fs.StringVar(&c.stream, "stream", "stdout", "stdout, stderr or both (alternating lines)")
	fs.Int64Var(&c.bytes, "bytes", 0, "bytes to write in the run")
	fs.StringVar(&lines, "lines", "100", "line lengths in bytes, newline included, used in turn (comma-separated)")
	fs.DurationVar(&c.runFor, "for", 0, "spread the run's bytes over this long (0: all at once)")
	fs.DurationVar(&c.every, "every", 100*time.Millisecond, "write a chunk this often")
	fs.BoolVar(&c.noFinalNewline, "no-final-newline", false, "leave the run's last line without its newline")
	fs.DurationVar(&c.delay, "delay", 0, "stay quiet this long before writing (a container that starts its output late)")
	fs.DurationVar(&c.hold, "hold", 0, "keep running this long after writing (until SIGTERM)")
	fs.IntVar(&c.exit, "exit", 0, "exit code at the end of the run")
	fs.IntVar(&c.exitRuns, "exit-runs", -1, "only the first this many runs exit with -exit, later ones with 0 (a crash loop that ends; -1: every run)")
	fs.Int64Var(&c.termBytes, "term-bytes", 0, "bytes to write after SIGTERM")
	fs.DurationVar(&c.termFor, "term-for", 0, "spread the SIGTERM output over this long")
	fs.IntVar(&c.termExit, "term-exit", 143, "exit code after SIGTERM")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, s := range strings.Split(lines, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return c, fmt.Errorf("bad line length %q", s)
		}
		c.lines = append(c.lines, n)
	}
	if c.stream != "stdout" && c.stream != "stderr" && c.stream != "both" {
		return c, fmt.Errorf("bad stream %q", c.stream)
	}
	if c.every <= 0 {
		return c, errors.New("-every must be positive")
	}
	return c, nil
}

// writer writes the lines and records them.
type writer struct {
	cfg  config
	runN int
	line int // lines written so far, both phases
	// all, out and errs are the record files.
	all, out, errs *os.File
}

func newWriter(cfg config) (*writer, error) {
	dir := filepath.Join(cfg.record, os.Getenv("POD_NAMESPACE"), os.Getenv("POD_UID"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	w := &writer{cfg: cfg}
	// The first free run number: runs of one container never overlap.
	for ; ; w.runN++ {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%s-%d.all", cfg.name, w.runN)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		w.all = f
		break
	}
	var err error
	base := filepath.Join(dir, fmt.Sprintf("%s-%d", cfg.name, w.runN))
	if w.out, err = os.Create(base + ".stdout"); err != nil {
		return nil, err
	}
	if w.errs, err = os.Create(base + ".stderr"); err != nil {
		return nil, err
	}
	return w, nil
}

// run writes the run's output, holds, and returns the exit code; SIGTERM at any point switches to
// the shutdown output.
func (w *writer) run(term <-chan os.Signal) int {
	select {
	case <-term:
		return w.shutdown()
	case <-time.After(w.cfg.delay):
	}
	if w.phase("run", w.cfg.bytes, w.cfg.runFor, !w.cfg.noFinalNewline, term) {
		return w.shutdown()
	}
	select {
	case <-term:
		return w.shutdown()
	case <-time.After(w.cfg.hold):
		if w.cfg.exitRuns >= 0 && w.runN >= w.cfg.exitRuns {
			return 0
		}
		return w.cfg.exit
	}
}

func (w *writer) shutdown() int {
	w.phase("term", w.cfg.termBytes, w.cfg.termFor, true, nil)
	return w.cfg.termExit
}

// phase writes total bytes over d in chunks every w.cfg.every, and reports whether SIGTERM came
// (then it stops at once, mid-line if need be). finalNewline false leaves the phase's last line
// without a newline. A line longer than a chunk spreads over several: the rate holds for long
// lines too.
func (w *writer) phase(name string, total int64, d time.Duration, finalNewline bool, term <-chan os.Signal) bool {
	chunks := int64(d / w.cfg.every)
	if chunks < 1 {
		chunks = 1
	}
	start := time.Now()
	var written int64
	var line []byte // the rest of the line being written
	var dst io.Writer
	var rec *os.File
	for i := int64(1); written < total; i++ {
		// Chunk i ends at byte total*i/chunks, due at start + (i-1)*every: the rate holds however
		// long the writes take.
		if wait := time.Until(start.Add(time.Duration(i-1) * w.cfg.every)); wait > 0 {
			select {
			case <-term:
				return true
			case <-time.After(wait):
			}
		}
		upTo := total * i / chunks
		if i >= chunks {
			upTo = total
		}
		for written < upTo {
			if len(line) == 0 {
				n := min(int64(w.cfg.lines[w.line%len(w.cfg.lines)]), total-written)
				last := written+n == total
				line, dst, rec = w.nextLine(name, int(n), !last || finalNewline)
			}
			p := line[:min(int64(len(line)), piece, upTo-written)]
			line = line[len(p):]
			w.write(dst, rec, p)
			written += int64(len(p))
		}
	}
	return false
}

// nextLine makes the next line of n bytes (the newline included if newline) and says where it
// goes: its stream and that stream's record.
func (w *writer) nextLine(phase string, n int, newline bool) ([]byte, io.Writer, *os.File) {
	stream, rec := "stdout", w.out
	dst := io.Writer(os.Stdout)
	if w.cfg.stream == "stderr" || (w.cfg.stream == "both" && w.line%2 == 1) {
		stream, rec, dst = "stderr", w.errs, os.Stderr
	}
	line := content(fmt.Sprintf("%s run=%d %s %s %d ", w.cfg.name, w.runN, stream, phase, w.line), n, newline)
	w.line++
	return line, dst, rec
}

// write writes p to dst, then records it: a record never claims what the stream did not get.
func (w *writer) write(dst io.Writer, rec *os.File, p []byte) {
	if _, err := dst.Write(p); err != nil {
		fmt.Fprintln(os.Stderr, "workload: write:", err)
		os.Exit(3)
	}
	for _, f := range []*os.File{w.all, rec} {
		if _, err := f.Write(p); err != nil {
			fmt.Fprintln(os.Stderr, "workload: record:", err)
			os.Exit(3)
		}
	}
}

// content is a line of n bytes: the header (cut if longer), filler, and the newline if newline.
func content(header string, n int, newline bool) []byte {
	b := bytes.NewBuffer(make([]byte, 0, n))
	body := n
	if newline {
		body--
	}
	if len(header) > body {
		header = header[:body]
	}
	b.WriteString(header)
	for i := 0; b.Len() < body; i++ {
		b.WriteByte('a' + byte(i%26))
	}
	if newline {
		b.WriteByte('\n')
	}
	return b.Bytes()
}
