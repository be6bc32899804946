package mdsteps

import (
	"strings"
	"testing"
)

// TestParse: sh blocks are steps, a text block right after one is its
// output, other fences are prose; a stray text block or an open fence is
// an error.
func TestParse(t *testing.T) {
	page := "# Page\n\n```sh\necho a\n```\n\n```text\na\n```\n\nProse.\n\n```yaml\nk: v\n```\n\n```sh\ntrue\n```\n\nMore prose.\n"
	steps, err := Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Script != "echo a\n" || strings.Join(steps[0].Expected, "|") != "a" || steps[0].Line != 3 ||
		steps[1].Script != "true\n" || steps[1].Expected != nil {
		t.Fatalf("steps = %+v", steps)
	}
	for _, tc := range []struct{ name, page, want string }{
		{name: "text after prose", page: "```sh\nx\n```\n\nprose\n\n```text\ny\n```\n", want: "follows no sh block"},
		{name: "text first", page: "```text\ny\n```\n", want: "follows no sh block"},
		{name: "open fence", page: "```sh\nx\n", want: "never closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.page); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestMatch: what varies between runs is tolerated, nothing else is.
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		name           string
		expected, got  []string
		wantMismatched bool
	}{
		{name: "column widths and ages", expected: []string{"NAME   READY   AGE", "web    1/1     12s"}, got: []string{"NAME READY AGE", "web  1/1  3m4s"}},
		{name: "pod hashes", expected: []string{"web-7d9f8b6c4d-x2kqp   Running"}, got: []string{"web-5c6b7f9d48-q8wzt   Running"}},
		{name: "addresses and dates", expected: []string{"LAST DEPLOYED: Sun Nov 29 07:10:17 2026", "url http://10.233.0.1:14000/load"},
			got: []string{"LAST DEPLOYED: Mon Dec  1 10:00:00 2026", "url http://10.233.0.1:23456/load"}},
		{name: "elision", expected: []string{"NAME: capscale", "...", "STATUS: deployed"}, got: []string{"NAME: capscale", "a", "b", "STATUS: deployed"}},
		{name: "elision of nothing", expected: []string{"a", "...", "b"}, got: []string{"a", "b"}},
		{name: "blank lines", expected: []string{"a", "", "b"}, got: []string{"a", "b", ""}},
		{name: "another number", expected: []string{"real-node-1   3   1   2"}, got: []string{"real-node-1   3   2   1"}, wantMismatched: true},
		{name: "another name", expected: []string{"web-7d9f8b6c4d-x2kqp   Running"}, got: []string{"api-5c6b7f9d48-q8wzt   Running"}, wantMismatched: true},
		{name: "a line more", expected: []string{"a"}, got: []string{"a", "b"}, wantMismatched: true},
		{name: "a line less", expected: []string{"a", "b"}, got: []string{"a"}, wantMismatched: true},
		{name: "a status", expected: []string{"web 1/1 Running"}, got: []string{"web 0/1 Pending"}, wantMismatched: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Match(tc.expected, tc.got)
			if (err != nil) != tc.wantMismatched {
				t.Errorf("Match(%q, %q) = %v, want mismatch %v", tc.expected, tc.got, err, tc.wantMismatched)
			}
		})
	}
}
