// Package mdheadings reads the headings of a Markdown page as a reader sees
// them: the one reading the docs' and the chart's tests share when they
// check that a section named in prose exists.
package mdheadings

import (
	"regexp"
	"strings"
)

// link is a link inside a heading: its text stays, its target goes.
var link = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// Of returns the headings of the Markdown text outside fenced code,
// without their marks, code spans' backticks and links' targets.
func Of(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = link.ReplaceAllString(h, "$1")
		out = append(out, strings.ReplaceAll(h, "`", ""))
	}
	return out
}
