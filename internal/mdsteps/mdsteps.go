// Package mdsteps reads a Markdown page as a list of shell steps, each with
// the output the page says it prints, and checks an output against it: so
// that a test can run a page's commands as written and the page cannot
// drift from what they do (docs/getting-started.md, e2e
// TestRealNodeGettingStarted).
//
// A step is a fenced block marked sh. The fenced block marked text that
// follows it (only blank lines between) is its expected output; a step
// without one prints nothing the page promises. Other fences (yaml, …) are
// prose, not steps.
//
// Matching is line by line, in order, after Normalize on both sides; a line
// "..." in the expected output stands for any number of lines. Normalize is
// the documented tolerance for what differs from run to run and from the
// reader's cluster: ages and durations, the hash suffixes of a
// Deployment's pod names, IPv4 addresses with their port, dates, and runs
// of spaces (column widths).
package mdsteps

import (
	"fmt"
	"regexp"
	"strings"
)

// Step is one command block of a page and the output the page shows for it.
type Step struct {
	// Line is the line of the page where the block's fence opens.
	Line int
	// Script is the block's text, run as one shell script.
	Script string
	// Expected is the following text block's lines; nil when none.
	Expected []string
}

// Parse returns the page's steps in order. An unclosed fence is an error,
// and so is a text block that follows no sh block (its output would be
// checked against nothing).
func Parse(page string) ([]Step, error) {
	var steps []Step
	lines := strings.Split(page, "\n")
	// lastClosed: the step whose block closed with only blank lines since,
	// which a text block then belongs to.
	lastClosed := -1
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "```") {
			if strings.TrimSpace(l) != "" {
				lastClosed = -1
			}
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(l, "```"))
		start := i
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: fence never closed", start+1)
		}
		switch lang {
		case "sh":
			steps = append(steps, Step{Line: start + 1, Script: strings.Join(body, "\n") + "\n"})
			lastClosed = len(steps) - 1
		case "text":
			if lastClosed < 0 {
				return nil, fmt.Errorf("line %d: a text block that follows no sh block", start+1)
			}
			steps[lastClosed].Expected = append([]string{}, body...)
			lastClosed = -1
		default:
			lastClosed = -1
		}
	}
	return steps, nil
}

var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	// Dates as helm prints them: Sun Nov 29 07:10:17 2026.
	{regexp.MustCompile(`\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4}\b`), "<date>"},
	// A Deployment's pods: NAME-<ReplicaSet hash>-<pod suffix>.
	{regexp.MustCompile(`\b([a-z0-9-]+?)-[b-df-hj-np-tv-z2-9]{8,10}-[b-df-hj-np-tv-z2-9]{5}\b`), "$1-<hash>"},
	// IPv4 addresses, with a port when given.
	{regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(:\d+)?\b`), "<ip>"},
	// Ages and durations: 5s, 42.1s, 3m4s, 2d3h, 90m.
	{regexp.MustCompile(`(^|[\s(])\d+(\.\d+)?(d|h|m|s)(\d+(\.\d+)?(h|m|s))?([\s)]|$)`), "$1<age>$7"},
	{regexp.MustCompile(`\s+`), " "},
}

// Normalize is the tolerance of a comparison: what varies between runs
// becomes a placeholder, and a run of spaces one space.
func Normalize(line string) string {
	for _, n := range normalizers {
		line = n.re.ReplaceAllString(line, n.with)
	}
	return strings.TrimSpace(line)
}

// Match reports whether output (a command's lines) is what expected says,
// and when not, the first expected line that found no match.
func Match(expected, output []string) error {
	want := make([]string, len(expected))
	for i, l := range expected {
		want[i] = Normalize(l)
	}
	got := make([]string, 0, len(output))
	for _, l := range output {
		if n := Normalize(l); n != "" {
			got = append(got, n)
		}
	}
	var w []string
	for _, l := range want {
		if l != "" {
			w = append(w, l)
		}
	}
	if matchFrom(w, got) {
		return nil
	}
	return fmt.Errorf("the output does not match the page (tolerance: mdsteps.Normalize; \"...\" any lines)\n--- the page, normalized:\n%s\n--- the output, normalized:\n%s",
		strings.Join(w, "\n"), strings.Join(got, "\n"))
}

// matchFrom matches want against got in full, "..." standing for any run
// of lines (backtracking; the pages' blocks are a few lines).
func matchFrom(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for k := 0; k <= len(got); k++ {
			if matchFrom(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && got[0] == want[0] && matchFrom(want[1:], got[1:])
}
