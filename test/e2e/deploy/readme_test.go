package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/test/testbed"
)

// TestReadmeFlagReference checks the README's flag reference against each binary's --help: every
// flag documented, nothing documented that does not exist.
func TestReadmeFlagReference(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testbed.ModuleRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range []string{"archiver", "webhook", "archiver agent", "archiver audit verify", "archiver audit export"} {
		t.Run(prog, func(t *testing.T) {
			bin, sub, _ := strings.Cut(prog, " ")
			args := append(strings.Fields(sub), "--help")
			out, _ := exec.Command(testbed.GoBuild(t, "./"+bin), args...).CombinedOutput() // --help exits 0 or 2 by flag package
			got := names(regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`), string(out))
			if len(got) == 0 {
				t.Fatalf("%s --help lists no flags:\n%s", prog, out)
			}
			section := readmeSection(string(readme), "### "+prog)
			documented := names(regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)`"), section)
			if diff := cmp.Diff(got, documented); diff != "" {
				t.Errorf("README's %s flags differ from --help (-help +README):\n%s", prog, diff)
			}
		})
	}
}

func names(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}

// readmeSection returns the text from heading to the next heading of the same or a higher level.
func readmeSection(readme, heading string) string {
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := readme[i+len(heading)+2:]
	if j := regexp.MustCompile(`(?m)^#{1,3} `).FindStringIndex(rest); j != nil {
		rest = rest[:j[0]]
	}
	return rest
}
