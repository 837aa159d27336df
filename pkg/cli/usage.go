package cli

import (
	"fmt"
	"strings"
)

// width is where the usage texts wrap.
const width = 100

// usage is the help of the command named path: for a group, its commands with their examples;
// for a command, its examples (the flag set prints its flags after it).
func (c *Command) usage(path string) string {
	var b strings.Builder
	if c.bind == nil {
		fmt.Fprintf(&b, "Usage: %s COMMAND [flags]\n\n", path)
	} else {
		fmt.Fprintf(&b, "Usage: %s [flags]\n\n", path)
	}
	b.WriteString(wrap(c.about(), width, "", ""))
	if c.bind == nil {
		b.WriteString("\nCommands:\n")
		pad := 0
		for _, s := range c.Subcommands {
			pad = max(pad, len(s.Name))
		}
		indent := strings.Repeat(" ", pad+4)
		for _, s := range c.Subcommands {
			b.WriteString(wrap(s.Summary, width, fmt.Sprintf("  %-*s  ", pad, s.Name), indent))
			for _, e := range s.Examples {
				fmt.Fprintf(&b, "%s  %s\n", indent, e)
			}
		}
	} else if len(c.Examples) > 0 {
		b.WriteString("\nExamples:\n")
		for _, e := range c.Examples {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	b.WriteString("\nExit status:\n")
	for _, e := range exitStatus {
		b.WriteString(wrap(e.Meaning, width, fmt.Sprintf("  %d  ", e.Code), "     "))
	}
	if c.bind == nil {
		fmt.Fprintf(&b, "Run '%s COMMAND -h' for a command's flags.\n", path)
	} else {
		b.WriteString("\nFlags:\n")
	}
	return b.String()
}

// about is the command's summary and description, as paragraphs.
func (c *Command) about() string {
	if c.Description == "" {
		return c.Summary
	}
	return c.Summary + "\n\n" + c.Description
}

// wrap breaks each paragraph of text (separated by blank lines) into lines of at most width
// characters, with one blank line between paragraphs. The first line starts with first, every
// other with rest.
func wrap(text string, width int, first, rest string) string {
	var b strings.Builder
	for i, para := range strings.Split(text, "\n\n") {
		line, empty := rest, true
		if i == 0 {
			line = first
		} else {
			b.WriteString("\n")
		}
		for _, w := range strings.Fields(para) {
			switch {
			case empty:
				line, empty = line+w, false
			case len(line)+1+len(w) > width:
				b.WriteString(line + "\n")
				line = rest + w
			default:
				line += " " + w
			}
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
