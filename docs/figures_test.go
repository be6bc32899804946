package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The figures a page quotes are BENCHMARKS.md's, as its links are files and
// headings that exist (docs/development.md "The docs").
//
// The rule. A *quoting block* of README.md, docs/*.md or docs/design/*.md is a paragraph, a
// list item or a table row (outside generated tables), or a run of comment
// lines in a code block or in the chart's values.yaml, that
// cites BENCHMARKS.md (a link or its name), says "measured" ("measurable",
// "measurement", "measures"), gives a rate in pods/s or req/s or a cost per
// pod, or names a benchmark (-bench, benche2e, make bench…). Every figure in
// a quoting block must be a figure of the tables under "Current figures" in
// BENCHMARKS.md. A *figure* is a number with a decimal point (0.94, 14.4), a
// number with a unit (865 s, 35 min, 1,118 B, 8.9%, 1.06×, 281.0 pods/s; the
// units are unitRE's), or a Go duration (9m01s); each end of a range
// (0.92–1.02 ms) is one. Not figures: inline code and link targets,
// versions (v1.37.2, Go 1.26), dates and times, numbers glued to letters
// (p99, k8s, a commit hash), and integers without a unit (500 nodes, 24
// rounds, issue 26). So a configuration value in a quoting block — a flag's
// default, a timeout — is written as code (`--kube-api-qps` `50`, `15s`) or
// in a paragraph of its own.
//
// In the tables, figures are read the same way from the columns that hold
// measurements (measure, figure, spread, goal), not from command, date,
// commit, Kubernetes or machine. A quoted figure matches a table figure of
// the same value (0.9 matches 0.90) and unit (4.0 ms does not match 4.0 min;
// a figure written without a unit on either side matches on its value). The
// test catches a figure that drifted or was never measured; a drifted ratio
// that happens to equal another row's ratio passes.

var (
	// numberRE is a number as prose writes it, with thousands separators
	// and a decimal point (a sign before it is not part of it); a Go
	// duration (9m01s, 2m44s) is one token.
	numberRE = regexp.MustCompile(`(?:\d+h)?\d+m\d+(?:\.\d+)?s|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?`)
	// unitRE is a unit right after a number (a space allowed); the
	// longer spellings first.
	unitRE = regexp.MustCompile(`^ ?(pods/s|req/s|calls/s|binds/s|ms/pod|MiB/h|µs|us|ns|ms|minutes?|min|seconds?|s|hours?|h|GiB|MiB|KiB|GB|MB|KB|kB|B|%|×|x)(?:[^\pL\pN]|$)`)
	// rangeRE is the separator of a range whose unit follows its second
	// end: 0.92–1.02 ms, 4-6%.
	rangeRE = regexp.MustCompile(`^ ?(?:–|-|to) ?$`)
	// versionRE, dateRE and timeRE are numbers that are not figures.
	versionRE = regexp.MustCompile(`\b(?:v|go|Go |Kubernetes |KEDA v?|kube-scheduler v)\d+(?:\.\d+)+|\b\d+\.\d+\.\d+\b`)
	dateRE    = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}\b`)
	timeRE    = regexp.MustCompile(`\b\d{1,2}:\d{2}(?::\d{2})?\b`)
	// quotingRE marks a block that quotes measurements.
	quotingRE = regexp.MustCompile(`BENCHMARKS\.md|(?i:\bmeasur(?:ed|es|able|ement))|pods/s|req/s|\bper (?:underlay )?pod\b|-bench\b|\bbench(?:e2e|-e2e|-keda)?\b`)
	// linkTargetRE is a link's or image's target, which is no prose.
	linkTargetRE = regexp.MustCompile(`\]\([^)]*\)`)
)

// figure is a figure of a page: its text as written (with its unit) and
// its value, the key it is matched on.
type figure struct {
	text, value, unit string
	line              int
}

// figuresIn returns the figures of one line of prose.
func figuresIn(line string) []figure {
	line = codeRE.ReplaceAllString(line, " ")
	line = linkTargetRE.ReplaceAllString(line, "]")
	line = strings.NewReplacer("**", "", "\u00a0", " ").Replace(line)
	for _, re := range []*regexp.Regexp{versionRE, dateRE, timeRE} {
		line = re.ReplaceAllStringFunc(line, func(s string) string { return strings.Repeat("_", len(s)) })
	}
	var out []figure
	var pending []figure // a range's first end, waiting for the unit after the second
	locs := numberRE.FindAllStringIndex(line, -1)
	for i, loc := range locs {
		start, end := loc[0], loc[1]
		text := line[start:end]
		if glued(line, start, end) {
			pending = nil
			continue
		}
		if strings.HasSuffix(text, "s") && strings.Contains(text, "m") { // a Go duration
			out = append(out, figure{text: text, value: text})
			pending = nil
			continue
		}
		f := figure{text: text, value: canonical(text)}
		if m := unitRE.FindStringSubmatchIndex(line[end:]); m != nil {
			f.text, f.unit = line[start:end+m[3]], unitOf(line[end+m[2]:end+m[3]])
		}
		unit := f.unit
		switch {
		case unit != "" || strings.Contains(text, "."):
			for _, p := range pending {
				p.unit = unit
				out = append(out, p)
			}
			out = append(out, f)
			pending = nil
		case i+1 < len(locs) && rangeRE.MatchString(line[end:locs[i+1][0]]):
			pending = []figure{f} // an integer range end: a figure if the range has a unit
		default:
			pending = nil
		}
	}
	return out
}

// glued reports whether the number at line[start:end] is part of a word or
// a longer token (p99, k8s, 3005a8a, e2e, x2): letters, digits or a dot
// glued to it, a unit excepted.
func glued(line string, start, end int) bool {
	if start > 0 {
		r := lastRune(line[:start])
		if isWordRune(r) || r == '.' || r == '_' || r == '/' || r == '#' {
			return true
		}
	}
	if end < len(line) {
		rest := line[end:]
		r := firstRune(rest)
		if isWordRune(r) && unitRE.FindString(rest) == "" {
			return true
		}
	}
	return false
}

func isWordRune(r rune) bool {
	return r == '_' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || r > 0x7f && r != '×' && r != '–' && r != '−' && r != '±' && r != '≈' && r != '≤' && r != '≥' && r != '\u00a0' && r != '→'
}

func lastRune(s string) rune {
	r := []rune(s)
	return r[len(r)-1]
}

func firstRune(s string) rune {
	for _, r := range s {
		return r
	}
	return 0
}

// unitOf is a unit's canonical spelling.
func unitOf(u string) string {
	switch u {
	case "minute", "minutes":
		return "min"
	case "second", "seconds":
		return "s"
	case "hour", "hours":
		return "h"
	case "x":
		return "×"
	case "us":
		return "µs"
	case "kB":
		return "KB"
	}
	return u
}

// canonical is a number's value as a key: separators dropped, trailing
// zeros of the fraction dropped (0.90 is 0.9).
func canonical(text string) string {
	text = strings.ReplaceAll(text, ",", "")
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return text
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// block is a paragraph, list item or table row: its lines and the line
// number of the first.
type block struct {
	first int
	lines []string
}

// codeCommentRE is a comment line of fenced code or of a YAML file (# or
// //), its text after the mark.
var codeCommentRE = regexp.MustCompile(`^\s*(?:#|//) ?(.*)$`)

// blocks splits a Markdown page into blocks, leaving out generated tables,
// HTML comments and fenced code but for its comments: a run of comment
// lines in fenced code is a block of prose (a figure in a comment of an
// example is quoted as much as one in a paragraph). fenced reads the whole
// text as fenced code (values.yaml).
func blocks(text string, fenced bool) []block {
	var out []block
	var cur *block
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	fence, generated, comment := "", false, false
	if fenced {
		fence = "\x00" // no closing fence
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence != "":
			m := codeCommentRE.FindStringSubmatch(line)
			switch {
			case strings.HasPrefix(trimmed, fence):
				flush()
				fence = ""
			case m != nil:
				if cur == nil {
					cur = &block{first: i + 1}
				}
				cur.lines = append(cur.lines, m[1])
			default:
				flush()
			}
			continue
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			flush()
			fence = trimmed[:3]
			continue
		case strings.HasPrefix(trimmed, "<!-- BEGIN GENERATED"):
			flush()
			generated = true
			continue
		case generated:
			generated = !strings.HasPrefix(trimmed, endTag)
			continue
		case comment || strings.HasPrefix(trimmed, "<!--"):
			flush()
			comment = !strings.Contains(trimmed, "-->")
			continue
		}
		newBlock := trimmed == "" || strings.HasPrefix(trimmed, "|") || strings.HasPrefix(trimmed, "#") ||
			listItemRE.MatchString(trimmed) || cur != nil && strings.HasPrefix(strings.TrimSpace(cur.lines[0]), "|")
		if newBlock {
			flush()
		}
		if trimmed == "" {
			continue
		}
		if cur == nil {
			cur = &block{first: i + 1}
		}
		cur.lines = append(cur.lines, line)
	}
	flush()
	return out
}

var listItemRE = regexp.MustCompile(`^(?:[-*+]|\d+\.) `)

// quotedFigures returns the figures of a page's quoting blocks; fenced:
// the text is code whose comments are the prose (values.yaml).
func quotedFigures(text string, fenced bool) []figure {
	var out []figure
	for _, b := range blocks(text, fenced) {
		prose := strings.Join(b.lines, "\n")
		if !quotingRE.MatchString(linkTargetRE.ReplaceAllStringFunc(prose, keepBenchmarksLink)) {
			continue
		}
		for j, line := range b.lines {
			for _, f := range figuresIn(line) {
				f.line = b.first + j
				out = append(out, f)
			}
		}
	}
	return out
}

// keepBenchmarksLink drops a link target but keeps the fact that it is
// BENCHMARKS.md: a link there cites it.
func keepBenchmarksLink(target string) string {
	if strings.Contains(target, "BENCHMARKS.md") {
		return "](BENCHMARKS.md)"
	}
	return "]"
}

// benchTable is the current figures of BENCHMARKS.md: the rows of every
// table in its "Current figures" section, as written (inline code kept),
// with the line of each row.
type benchTable struct {
	header []string
	rows   [][]string
	lines  []int
}

// benchColumns are the columns of every current-figures table.
var benchColumns = []string{"measure", "figure", "spread", "goal", "command", "date", "commit", "Kubernetes", "machine"}

// measurementColumns are the columns whose figures quotes may cite.
var measurementColumns = map[string]bool{"measure": true, "figure": true, "spread": true, "goal": true}

// currentSection is the heading of BENCHMARKS.md's tables of current
// figures; they run to the next heading of its level.
const currentSection = "## Current figures"

func readBenchTable(t *testing.T, path string) benchTable {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tab benchTable
	in, inTable := false, false
	for i, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == currentSection:
			in = true
			continue
		case in && strings.HasPrefix(trimmed, "## "):
			in = false
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(trimmed, "|") {
			inTable = false
			continue
		}
		cells := rawCells(trimmed)
		switch {
		case !inTable:
			inTable = true
			if tab.header == nil {
				tab.header = cells
			} else if strings.Join(cells, "|") != strings.Join(tab.header, "|") {
				t.Errorf("%s:%d: a table whose columns are %q, not %q", path, i+1, cells, tab.header)
			}
		case separatorRE.MatchString(trimmed):
		default:
			tab.rows = append(tab.rows, cells)
			tab.lines = append(tab.lines, i+1)
		}
	}
	if tab.header == nil {
		t.Fatalf("%s: no table under %q", path, currentSection)
	}
	return tab
}

var separatorRE = regexp.MustCompile(`^\|(?:\s*:?-+:?\s*\|)+$`)

// rawCells splits a table row at its unescaped pipes, keeping each cell's
// Markdown.
func rawCells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// knownFigures are a table's figures: each value with the units it is
// given ("" where the table leaves the unit to the cell's text).
type knownFigures map[string]map[string]bool

// has reports whether f is a known figure: the same value, and the same
// unit unless one side leaves it implicit.
func (k knownFigures) has(f figure) bool {
	units := k[f.value]
	return units != nil && (f.unit == "" || units[""] || units[f.unit])
}

// tableFigures returns the figures in the table's measurement columns.
func (tab benchTable) tableFigures() knownFigures {
	out := knownFigures{}
	for _, row := range tab.rows {
		for c, name := range tab.header {
			if c >= len(row) || !measurementColumns[columnKey(name)] {
				continue
			}
			for _, f := range figuresIn(row[c]) {
				if out[f.value] == nil {
					out[f.value] = map[string]bool{}
				}
				out[f.value][f.unit] = true
			}
		}
	}
	return out
}

// columnKey is a header cell's name in lower case.
func columnKey(h string) string { return strings.ToLower(strings.TrimSpace(h)) }

// unbenchmarked returns, for every page under root but BENCHMARKS.md, the
// quoted figures that are not figures of BENCHMARKS.md's table.
func unbenchmarked(t *testing.T, root string) []string {
	t.Helper()
	known := readBenchTable(t, filepath.Join(root, "BENCHMARKS.md")).tableFigures()
	pages := []string{filepath.Join(root, "README.md")}
	for _, glob := range []string{"*.md", "design/*.md"} {
		more, err := filepath.Glob(filepath.Join(root, "docs", glob))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, more...)
	}
	// The chart's values.yaml: its comments are what an operator reads.
	values := filepath.Join(root, "deploy", "helm", "capscale", "values.yaml")
	pages = append(pages, values)
	var bad []string
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		for _, f := range quotedFigures(string(b), p == values) {
			if !known.has(f) {
				bad = append(bad, fmt.Sprintf("%s:%d: %s is not a figure of BENCHMARKS.md's table", filepath.ToSlash(rel), f.line, f.text))
			}
		}
	}
	return bad
}

// TestQuotedFiguresAreBenchmarked: every figure README.md and docs/ quote
// from a measurement is in BENCHMARKS.md's table (the rule is at the top of
// this file).
func TestQuotedFiguresAreBenchmarked(t *testing.T) {
	for _, b := range unbenchmarked(t, "..") {
		t.Error(b + ` (a paragraph, list item or table row that cites BENCHMARKS.md, says "measured" or gives pods/s or req/s quotes only the table's figures: docs/development.md "The docs")`)
	}
}

var (
	// commandRE is a command cell: one code span (two backticks if the
	// command holds one).
	commandRE = regexp.MustCompile("^(?:`[^`]+`|`` [^`]+(?:`[^`]+)* ``)$")
	// notPasteableRE is what a command a person can paste does not say.
	notPasteableRE = regexp.MustCompile(`(?i)\bsame\b|…|\.\.\.|\(and\b`)
	dateCellRE     = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2})?$`)
	commitCellRE   = regexp.MustCompile(`^[0-9a-f]{7,12}$`)
	kubeCellRE     = regexp.MustCompile(`^(?:v\d+\.\d+\.\d+|—)$`)
	// loadRE is a load average in the machine cell: "load 2.9",
	// "load 3–5", "load below 2", "own load 4–7".
	loadRE = regexp.MustCompile(`(own )?load (?:below |≈ ?)?(\d+(?:\.\d+)?)(?:\s*[–-]\s*(\d+(?:\.\d+)?))?`)
	// parenRE is a parenthesis: a figure's conversion, "397 s (6.6 min)",
	// or the "(loaded)" mark.
	parenRE = regexp.MustCompile(`\([^()]*\)`)
)

// loadedMachine reports whether a machine cell says the run had heavy load
// from other work: a load average above 4 (twice the cores) that is not the
// measured work's own, or the shared machine with no load recorded.
func loadedMachine(machine string) bool {
	recorded := false
	for _, m := range loadRE.FindAllStringSubmatch(machine, -1) {
		if m[1] != "" {
			continue
		}
		recorded = true
		for _, n := range m[2:] {
			if v, err := strconv.ParseFloat(n, 64); err == nil && v > 4 {
				return true
			}
		}
	}
	return !recorded && strings.Contains(machine, "shared")
}

// isByteUnit: sizes do not move with the machine's load.
func isByteUnit(u string) bool { return strings.Contains(u, "B") }

// tableProblems returns what keeps a current-figures table from being one
// a reader can use: one measure a row, at most one figure in the figure
// cell (a conversion in parentheses aside), a command to paste, the date,
// commit, Kubernetes version and machine, and "(loaded)" exactly on the
// times and rates taken under load.
func tableProblems(tab benchTable) []string {
	var out []string
	if strings.Join(tab.header, "|") != strings.Join(benchColumns, "|") {
		return []string{fmt.Sprintf("columns %q, want %q", tab.header, benchColumns)}
	}
	col := map[string]int{}
	for i, h := range benchColumns {
		col[h] = i
	}
	measures := map[string]int{}
	for r, row := range tab.rows {
		line := tab.lines[r]
		bad := func(format string, args ...any) {
			out = append(out, fmt.Sprintf("line %d: ", line)+fmt.Sprintf(format, args...))
		}
		if len(row) != len(benchColumns) {
			bad("%d cells, want %d", len(row), len(benchColumns))
			continue
		}
		cell := func(name string) string { return row[col[name]] }
		if prev, dup := measures[cell("measure")]; dup {
			bad("the measure of line %d again: one row a measure, the later run replaces the earlier", prev)
		}
		measures[cell("measure")] = line
		fig := cell("figure")
		figures := figuresIn(parenRE.ReplaceAllString(fig, ""))
		switch {
		case fig == "" || fig == "—":
			bad("no figure")
		case len(figures) > 1:
			bad("figure %q holds %d figures: one a row, the spread in its own cell", fig, len(figures))
		}
		if cmd := cell("command"); !commandRE.MatchString(cmd) || notPasteableRE.MatchString(cmd) {
			bad("command %q: one code span a person can paste as it is", cmd)
		}
		if !dateCellRE.MatchString(cell("date")) {
			bad("date %q: YYYY-MM-DD, and the UTC time where known", cell("date"))
		}
		if !commitCellRE.MatchString(cell("commit")) {
			bad("commit %q: a short hash", cell("commit"))
		}
		if !kubeCellRE.MatchString(cell("Kubernetes")) {
			bad("Kubernetes %q: vX.Y.Z, or — for a run with no plane", cell("Kubernetes"))
		}
		if strings.TrimSpace(cell("machine")) == "" {
			bad("no machine")
		}
		timed := len(figures) == 1 && !isByteUnit(figures[0].unit)
		marked := strings.Contains(fig, "(loaded)")
		switch loaded := loadedMachine(cell("machine")); {
		case timed && loaded && !marked:
			bad("figure %q was taken under load (%q): mark it (loaded)", fig, cell("machine"))
		case marked && !(timed && loaded):
			bad("figure %q is marked (loaded), but the machine was %q", fig, cell("machine"))
		}
	}
	return out
}

// TestBenchmarksTables: BENCHMARKS.md's current figures are laid out for a
// reader (the columns are explained at the top of the page).
func TestBenchmarksTables(t *testing.T) {
	tab := readBenchTable(t, filepath.Join("..", "BENCHMARKS.md"))
	if len(tab.rows) < 20 {
		t.Fatalf("only %d rows of current figures", len(tab.rows))
	}
	for _, p := range tableProblems(tab) {
		t.Error("BENCHMARKS.md " + p)
	}
}

func TestFiguresIn(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       []string // text, then value and unit: "0.73 ms=0.73 ms"
	}{
		{name: "bold, with a unit", line: "**0.73 ms** at 5000 nodes", want: []string{"0.73 ms=0.73 ms"}},
		{name: "ratio range and ×", line: "0.92–1.02 at 5000 (1.06× its CPU)", want: []string{"0.92=0.92 ", "1.02=1.02 ", "1.06×=1.06 ×"}},
		{name: "integer range takes the unit", line: "±4–6% wide", want: []string{"4=4 %", "6%=6 %"}},
		{name: "spelled units", line: "865 s (14.4 min), about 35 minutes", want: []string{"865 s=865 s", "14.4 min=14.4 min", "35 minutes=35 min"}},
		{name: "separators and rates", line: "1,118 B a node; 18.5 pods/s", want: []string{"1,118 B=1118 B", "18.5 pods/s=18.5 pods/s"}},
		{name: "Go duration", line: "the cold build (9m01s on 2 cores)", want: []string{"9m01s=9m01s "}},
		{name: "not figures", line: "v1.37.2, Go 1.26, 2026-11-23 21:19, issue 26, 24 rounds, p99, e2e, HTTP/2, 3005a8a, `15s`, `0.5`", want: nil},
		{name: "link target", line: "[BENCHMARKS.md](../BENCHMARKS.md#cold-make-demo-issue-15-2026-11-23-2119) 1.5", want: []string{"1.5=1.5 "}},
		{name: "integer without a unit", line: "two runs of 500 pods on 20 nodes", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range figuresIn(tc.line) {
				got = append(got, f.text+"="+f.value+" "+f.unit)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("figuresIn(%q) = %q, want %q", tc.line, got, tc.want)
			}
		})
	}
}

func TestQuotedFigures(t *testing.T) {
	page := "# Title 1.5\n\n" +
		"Configured: a `15s` lease and a 10 s timeout.\n\n" +
		"Measured: 0.73 ms and\n5 s on another line.\n\n" +
		"- a list item, 2.5 ms, not citing\n" +
		"- one citing [BENCHMARKS.md](../BENCHMARKS.md): 1.06×\n\n" +
		"| row | 3.5 pods/s |\n|---|---|\n| plain | 7.5 |\n\n" +
		"```\nmeasured 9.9 ms in a code block\n```\n\n" +
		"```yaml\n# measured 4.4 ms in a comment\n# and 6.6 ms\nkey: 1.5 # 2.5 ms\n```\n\n" +
		"<!-- BEGIN GENERATED: flags x -->\n| measured | 8.8 ms |\n<!-- END GENERATED -->\n"
	var got []string
	for _, f := range quotedFigures(page, false) {
		got = append(got, fmt.Sprintf("%d:%s", f.line, f.text))
	}
	want := []string{"5:0.73 ms", "6:5 s", "9:1.06×", "11:3.5 pods/s", "20:4.4 ms", "21:6.6 ms"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("quotedFigures = %q, want %q", got, want)
	}
}

func TestTableProblems(t *testing.T) {
	const good = "| m | 0.73 ms | 95% 0.6–0.9 ms | — | `go test -bench . ./x/` | 2026-11-22 00:05 | c41c65b | — | 2c, load 0.6 |"
	for _, tc := range []struct {
		name, row, want string // want: a substring of the one problem, or "" for none
	}{
		{name: "good", row: good},
		{name: "verdict", row: "| m | 3 of 3 | — | — | `make soak` | 2026-11-26 | ae1aeb4 | v1.37.2 | 2c, quiet |"},
		{name: "conversion", row: "| m | 397 s (6.6 min) | — | — | `time make build` | 2026-11-26 08:06 | a995815 | v1.37.2 | 2c, quiet |"},
		{name: "two figures", row: "| m | 0.73 ms; prioritize 0.75 ms | — | — | `go test -bench . ./x/` | 2026-11-22 | c41c65b | — | 2c |", want: "holds 2 figures"},
		{name: "same command", row: "| m | 0.75 ms | — | — | same | 2026-11-22 | c41c65b | — | 2c |", want: "a person can paste"},
		{name: "and more", row: "| m | 0.75 ms | — | — | `make soak SOAK_MODES=x` (and `plugin`) | 2026-11-22 | c41c65b | — | 2c |", want: "a person can paste"},
		{name: "no commit", row: "| m | 0.75 ms | — | — | `make bench` | 2026-11-22 | — | — | 2c |", want: "short hash"},
		{name: "loaded, unmarked", row: "| m | 0.99 | — | — | `make bench` | 2026-11-23 17:47 | c4a5e11 | v1.37.1 | 2c, shared, load 28.4 |", want: "mark it (loaded)"},
		{name: "shared, no load", row: "| m | 0.81 ms | — | — | `make bench` | 2026-11-23 13:00 | 77cd636 | v1.37.1 | 2c, shared |", want: "mark it (loaded)"},
		{name: "own load", row: "| m | 211 s | — | — | `hack/cold-demo.sh` | 2026-11-23 21:19 | c5f996f | v1.37.2 | 2c, quiet, own load 4.7 falling to 0.8 |"},
		{name: "bytes under load", row: "| m | 123.6 MiB | — | — | `make bench` | 2026-11-23 16:59 | 40854a9 | v1.37.1 | 2c, shared, load 13.5–19.8 |"},
		{name: "marked, quiet", row: "| m | 0.96 (loaded) | — | — | `make bench` | 2026-11-27 01:30 | 393b71a | v1.37.2 | 2c, load 2.6 |", want: "is marked (loaded)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := benchTable{header: benchColumns, rows: [][]string{rawCells(tc.row)}, lines: []int{1}}
			got := tableProblems(tab)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("problems %q, want one saying %q", got, tc.want)
			}
		})
	}
}

// firstScreenLines is what BENCHMARKS.md shows before its "Current
// figures": one screen.
const firstScreenLines = 40

// firstScreenLinkRE is a first-screen figure cell: the figure as its row
// under "Current figures" writes it, linked to its method and history.
var firstScreenLinkRE = regexp.MustCompile(`^\[([^\]]+)\]\(#([^)\s]+)\)$`)

// firstScreenProblems returns what keeps BENCHMARKS.md's opening from being
// one screen of current figures: the opening over firstScreenLines, or a
// row of its table whose figure is not one cell, linked to a heading of the
// page, and written as the figure cell of a current-figures row (the same
// digits, the same "(loaded)").
func firstScreenProblems(page string, tab benchTable) []string {
	var out []string
	lines := strings.Split(page, "\n")
	end := -1
	for i, line := range lines {
		if strings.TrimSpace(line) == currentSection {
			end = i
			break
		}
	}
	if end < 0 {
		return []string{"no " + currentSection}
	}
	if end > firstScreenLines {
		out = append(out, fmt.Sprintf("%d lines before %q: the opening is one screen, at most %d", end, currentSection, firstScreenLines))
	}
	anchors, _ := scan(page)
	current := map[string]bool{}
	for _, row := range tab.rows {
		if len(row) > 1 {
			current[row[1]] = true
		}
	}
	rows := 0
	for i, line := range lines[:end] {
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "|") || separatorRE.MatchString(trimmed) {
			continue
		}
		cells := rawCells(trimmed)
		if cells[len(cells)-1] == "figure" {
			continue // the header
		}
		rows++
		bad := func(format string, args ...any) {
			out = append(out, fmt.Sprintf("line %d: ", i+1)+fmt.Sprintf(format, args...))
		}
		m := firstScreenLinkRE.FindStringSubmatch(cells[len(cells)-1])
		if len(cells) != 2 || m == nil {
			bad("%q: two cells, the measure and its figure as [figure](#its-method-and-history)", trimmed)
			continue
		}
		if !anchors[m[2]] {
			bad("%s links to #%s, which is no heading of BENCHMARKS.md", m[1], m[2])
		}
		if !current[m[1]] {
			bad("%s is no figure cell of the tables under %q: quote the row's figure as it is written there", m[1], currentSection)
		}
	}
	if rows == 0 {
		out = append(out, "no table of figures before "+currentSection)
	}
	return out
}

// TestBenchmarksFirstScreen: BENCHMARKS.md opens with one screen of current
// figures, each a link to its method and history.
func TestBenchmarksFirstScreen(t *testing.T) {
	path := filepath.Join("..", "BENCHMARKS.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range firstScreenProblems(string(b), readBenchTable(t, path)) {
		t.Error("BENCHMARKS.md " + p)
	}
}

func TestFirstScreenProblems(t *testing.T) {
	tab := benchTable{rows: [][]string{{"m", "0.96"}, {"n", "2.7 s (loaded)"}}}
	page := func(rows string) string {
		return "# B\n\n| measure | figure |\n|---|---|\n" + rows + "\n## Current figures\n\n## Method\n"
	}
	for _, tc := range []struct {
		name, page string
		want       int
	}{
		{name: "good", page: page("| a | [0.96](#method) |\n| b | [2.7 s (loaded)](#method) |\n"), want: 0},
		{name: "not linked", page: page("| a | 0.96 |\n"), want: 1},
		{name: "no such anchor", page: page("| a | [0.96](#nowhere) |\n"), want: 1},
		{name: "not a current figure", page: page("| a | [0.97](#method) |\n"), want: 1},
		{name: "the load mark dropped", page: page("| b | [2.7 s](#method) |\n"), want: 1},
		{name: "no table", page: page(""), want: 1},
		{name: "longer than a screen", page: strings.Repeat("\n", firstScreenLines) + page("| a | [0.96](#method) |\n"), want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstScreenProblems(tc.page, tab); len(got) != tc.want {
				t.Errorf("got %d problems %q, want %d", len(got), got, tc.want)
			}
		})
	}
}
