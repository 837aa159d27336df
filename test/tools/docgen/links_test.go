package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	notAnchor = regexp.MustCompile(`[^a-z0-9 _-]`)
)

// anchors are the GitHub anchors of a Markdown page's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		if m := mdHeading.FindStringSubmatch(line); m != nil && !inFence {
			out[strings.ReplaceAll(notAnchor.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")] = true
		}
	}
	return out
}

// TestDocLinks: every relative link of the README and of the pages under docs/ names a file of
// the repository, and a #fragment names a heading of the page it points to.
func TestDocLinks(t *testing.T) {
	pages := []string{filepath.Join(moduleRoot, "README.md")}
	err := filepath.WalkDir(filepath.Join(moduleRoot, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(moduleRoot, page)
		for _, m := range mdLink.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			info, err := os.Stat(path)
			if err != nil {
				t.Errorf("%s: link %q: %v", rel, target, err)
				continue
			}
			if frag == "" || info.IsDir() {
				continue
			}
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(text))[frag] {
				t.Errorf("%s: link %q: no heading #%s there", rel, target, frag)
			}
		}
	}
	if links < 20 {
		t.Errorf("found %d relative links in the README and docs/, want the README's and the pages' links", links)
	}
}
