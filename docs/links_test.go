package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// linkRE is an inline link or image: [text](target "title").
	linkRE = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	// codeRE is an inline code span, which holds no link.
	codeRE = regexp.MustCompile("``[^`]+``|`[^`]+`")
	// headingLinkRE is a link inside a heading: GitHub slugs its text.
	headingLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// htmlAnchorRE is an explicit anchor: <a name="x"> or id="x".
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// markdownFiles are the repository's Markdown files (README.md,
// BENCHMARKS.md, docs/**, and any other), build output left out.
func markdownFiles(t *testing.T, root string) []string {
	return repoFiles(t, root, nil, func(path string) bool { return strings.HasSuffix(path, ".md") })
}

// repoFiles walks root for the files keep takes, leaving out version
// control, build output, vendored code and the directories in skip.
func repoFiles(t *testing.T, root string, skip []string, keep func(path string) bool) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case name == ".git", name == "_output", name == "vendor", name == "node_modules", slices.Contains(skip, name):
				return filepath.SkipDir
			}
			return nil
		}
		if keep(path) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Slug is GitHub's anchor for a heading: lowercase, punctuation other than
// '-' and '_' dropped, spaces turned into '-'.
func Slug(heading string) string {
	heading = headingLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// scan returns a Markdown file's anchors and its links (with their line),
// outside fenced code blocks and inline code.
func scan(text string) (anchors map[string]bool, links []link) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			switch {
			case fence == "":
				fence = trimmed[:3]
			case strings.HasPrefix(trimmed, fence):
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if h := strings.TrimLeft(line, "#"); len(h) < len(line) && len(line)-len(h) <= 6 && strings.HasPrefix(h, " ") {
			s := Slug(codeRE.ReplaceAllStringFunc(h, func(c string) string { return strings.Trim(c, "` ") }))
			// GitHub numbers repeated headings: x, x-1, x-2.
			if n := seen[s]; n > 0 {
				anchors[s+"-"+strconv.Itoa(n)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			links = append(links, link{line: i + 1, target: m[1]})
		}
	}
	return anchors, links
}

type link struct {
	line   int
	target string
}

// brokenLinks checks every relative link of the Markdown files under root:
// its file must exist and its #anchor must be a heading of the target.
// External links are not fetched.
func brokenLinks(t *testing.T, root string) []string {
	t.Helper()
	files := markdownFiles(t, root)
	anchorsOf := map[string]map[string]bool{}
	linksOf := map[string][]link{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		anchorsOf[f], linksOf[f] = scan(string(b))
	}
	var broken []string
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		for _, l := range linksOf[f] {
			target := l.target
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					broken = append(broken, rel+":"+strconv.Itoa(l.line)+": "+target+": no such file")
					continue
				}
			}
			if anchor == "" {
				continue
			}
			anchors, ok := anchorsOf[dest]
			if !ok {
				broken = append(broken, rel+":"+strconv.Itoa(l.line)+": "+target+": an anchor into a file that is not Markdown")
				continue
			}
			if !anchors[anchor] {
				broken = append(broken, rel+":"+strconv.Itoa(l.line)+": "+target+": no heading #"+anchor)
			}
		}
	}
	return broken
}

// TestLinks: every relative link in the repository's Markdown resolves.
func TestLinks(t *testing.T) {
	for _, b := range brokenLinks(t, "..") {
		t.Error(b)
	}
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Two ways to install", "two-ways-to-install"},
		{"Configuration file (--config)", "configuration-file---config"},
		{"Native mode: kube-scheduler counts the IPs itself", "native-mode-kube-scheduler-counts-the-ips-itself"},
		{"capscale, KEDA or a native extended resource?", "capscale-keda-or-a-native-extended-resource"},
		{"Scheduler failover (deploy/scheduler/)", "scheduler-failover-deployscheduler"},
		{"KEDA keeps the APIService: capscale as an external scaler", "keda-keeps-the-apiservice-capscale-as-an-external-scaler"},
		{"snake_case and [a link](x.md)", "snake_case-and-a-link"},
		{"Failover and control-plane restarts (issue 18)", "failover-and-control-plane-restarts-issue-18"},
	} {
		if got := Slug(tc.heading); got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestScan(t *testing.T) {
	text := "# Title\n\n## Title\n\nSee [a](b.md#c) and `[not](a link)`.\n\n```\n[nor](this.md)\n## not a heading\n```\n"
	anchors, links := scan(text)
	for _, a := range []string{"title", "title-1"} {
		if !anchors[a] {
			t.Errorf("anchor %q missing from %v", a, anchors)
		}
	}
	if anchors["not-a-heading"] {
		t.Error("a heading inside a code block counted")
	}
	if len(links) != 1 || links[0].target != "b.md#c" || links[0].line != 5 {
		t.Errorf("links = %+v, want one to b.md#c on line 5", links)
	}
}

// citedAnchorRE is a page and heading anchor cited outside Markdown, from
// the repository's root: docs/x.md#anchor, BENCHMARKS.md#anchor.
var citedAnchorRE = regexp.MustCompile(`(?:^|[^\w/.-])((?:docs/(?:design/)?[\w-]+|BENCHMARKS|README)\.md)#([\w-]+)`)

// TestCitedAnchors: every page#anchor a comment, message, manifest or
// template cites (TestLinks reads only Markdown) is a heading of that page.
func TestCitedAnchors(t *testing.T) {
	root := ".."
	anchorsOf := map[string]map[string]bool{}
	for _, f := range citingFiles(t, root) {
		if filepath.Dir(f) == filepath.Join(root, "docs") && strings.HasSuffix(f, "_test.go") {
			continue // this package's tests hold made-up links
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range citedAnchorRE.FindAllStringSubmatch(line, -1) {
				anchors, ok := anchorsOf[m[1]]
				if !ok {
					page, err := os.ReadFile(filepath.Join(root, m[1]))
					if err != nil {
						t.Errorf("%s:%d cites %s#%s: %v", f, i+1, m[1], m[2], err)
						continue
					}
					anchors, _ = scan(string(page))
					anchorsOf[m[1]] = anchors
				}
				if !anchors[m[2]] {
					t.Errorf("%s:%d cites %s#%s: no such heading", f, i+1, m[1], m[2])
				}
			}
		}
	}
}
