package stack

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/jobvault/jobvault/test/testbed"
)

// DocBlock returns the first fenced code block of the given language in the section of page (a
// Markdown file relative to the module root) that starts at heading ("## Export", "### Policy"),
// up to the next heading of level 2: the commands a test runs as printed.
func DocBlock(t TB, page, heading, lang string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(testbed.ModuleRoot(), page))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", page, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```"+lang+"\n")
	if !ok {
		t.Fatalf("%s section %q has no %s block", page, heading, lang)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// DocLines are the command lines of a block, comments (" #" on) and blank lines left out.
func DocLines(block string) []string {
	var out []string
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, " #")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}
