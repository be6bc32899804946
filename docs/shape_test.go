package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The docs' shape (issue 57 §2): task pages a person can read at once, each
// saying first what its reader can do after it; the upstream reasoning, with
// its file:line citations, on design pages of one decision each, every one
// linked from a task page that rests on it; docs/scheduling.md an index.

// taskPages are the task pages. A page of docs/ that opens with
// taskOpening is one too, listed here or not.
var taskPages = []string{
	"choosing-a-mode.md",
	"underlay-pods.md",
	"capacity-sources.md",
	"plugin-mode.md",
	"extender-mode.md",
	"native-mode.md",
	"failure-and-recovery.md",
	"growing-the-cluster.md",
}

const (
	// taskOpening begins a task page's first paragraph.
	taskOpening = "After this page you can "
	// designOpening begins a design page's first paragraph.
	designOpening = "The decision: "
	// maxTaskPageLines: a task page is read at once.
	maxTaskPageLines = 300
	// maxIndexLines: docs/scheduling.md only points to the pages.
	maxIndexLines = 60
)

// upstreamCitationRE is a file:line citation of Go source
// (`pkg/x/y.go:12-34`, `y.go`:12): design pages hold them.
var upstreamCitationRE = regexp.MustCompile("\\.go`?:\\d")

// firstParagraph is the text of a page's first paragraph after its title.
func firstParagraph(text string) string {
	var para []string
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "# ") && para == nil:
		case trimmed == "" && para == nil:
		case trimmed == "":
			return strings.Join(para, " ")
		default:
			para = append(para, trimmed)
		}
	}
	return strings.Join(para, " ")
}

// docsShape returns what keeps the pages under root (the repository) from
// the shape above.
func docsShape(t *testing.T, root string) []string {
	t.Helper()
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var bad []string
	tasks := map[string]bool{}
	for _, p := range taskPages {
		tasks[filepath.Join(root, "docs", p)] = true
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if strings.HasPrefix(firstParagraph(read(p)), taskOpening) {
			tasks[p] = true
		}
	}
	designs, err := filepath.Glob(filepath.Join(root, "docs", "design", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for p := range tasks {
		rel, _ := filepath.Rel(root, p)
		if _, err := os.Stat(p); err != nil {
			bad = append(bad, rel+": a task page that does not exist")
			continue
		}
		text := read(p)
		if n := strings.Count(strings.TrimRight(text, "\n"), "\n") + 1; n > maxTaskPageLines {
			bad = append(bad, rel+": "+strconv.Itoa(n)+" lines, more than a task page's "+strconv.Itoa(maxTaskPageLines)+": split it by what its reader does")
		}
		if !strings.HasPrefix(firstParagraph(text), taskOpening) {
			bad = append(bad, rel+": its first paragraph does not say what the reader can do after it (\""+taskOpening+"…\")")
		}
		for i, line := range strings.Split(text, "\n") {
			if upstreamCitationRE.MatchString(line) {
				bad = append(bad, rel+":"+strconv.Itoa(i+1)+": a file:line citation: the why and its sources go on a docs/design page")
			}
		}
		_, links := scan(text)
		for _, l := range links {
			path, _, _ := strings.Cut(l.target, "#")
			if path == "" || strings.Contains(path, "://") {
				continue
			}
			linked[filepath.Clean(filepath.Join(filepath.Dir(p), path))] = true
		}
	}
	for _, d := range designs {
		rel, _ := filepath.Rel(root, d)
		if !linked[filepath.Clean(d)] {
			bad = append(bad, rel+": no task page links to it: link it from the task page that rests on it")
		}
		if !strings.HasPrefix(firstParagraph(read(d)), designOpening) {
			bad = append(bad, rel+": its first paragraph does not state its one decision (\""+designOpening+"…\")")
		}
	}
	index := filepath.Join(root, "docs", "scheduling.md")
	if n := strings.Count(strings.TrimRight(read(index), "\n"), "\n") + 1; n > maxIndexLines {
		bad = append(bad, "docs/scheduling.md: "+strconv.Itoa(n)+" lines: it is the index of the task pages, at most "+strconv.Itoa(maxIndexLines))
	}
	return bad
}

// TestDocsShape: no task page over maxTaskPageLines, each opening with what
// its reader can do and citing no upstream file:line, each design page
// stating its decision and linked from a task page, docs/scheduling.md an
// index.
func TestDocsShape(t *testing.T) {
	for _, b := range docsShape(t, "..") {
		t.Error(b)
	}
}

func TestFirstParagraph(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{name: "after the title", text: "# Title\n\nAfter this page you can\ngo.\n\nMore.\n", want: "After this page you can go."},
		{name: "no title", text: "\nThe decision: one.\n", want: "The decision: one."},
		{name: "a heading is no title once text began", text: "# T\n\n## Sub\n\ntext\n", want: "## Sub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstParagraph(tc.text); got != tc.want {
				t.Errorf("firstParagraph = %q, want %q", got, tc.want)
			}
		})
	}
}
