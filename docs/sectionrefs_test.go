package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capscale/capscale/internal/mdheadings"
)

// sectionRefRE is a section named in prose rather than linked, as the help
// texts write it (they are generated into reference.md): docs/x.md
// "Heading", README "Heading".
var sectionRefRE = regexp.MustCompile(`\b((?:docs/[\w-]+|README|BENCHMARKS)(?:\.md)?) \\?"([^"\\]+)\\?"`)

// TestSectionRefs: every section a page, a help text generated into one,
// or a comment, error message, manifest or chart template names as page
// "Heading" exists: a heading of that page equal to it or starting with it
// (a heading's words after a colon or a parenthesis may be left out). A
// name that a comment breaks across lines is not read.
func TestSectionRefs(t *testing.T) {
	root := ".."
	headings := map[string][]string{}
	files := append(markdownFiles(t, root), citingFiles(t, root)...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range sectionRefRE.FindAllStringSubmatch(line, -1) {
				if m[2] == "Heading" {
					continue // the form itself, as this test and deploy/'s write it
				}
				page := m[1]
				if !strings.HasSuffix(page, ".md") {
					page += ".md"
				}
				hs, ok := headings[page]
				if !ok {
					hs = pageHeadings(t, filepath.Join(root, page))
					headings[page] = hs
				}
				found := false
				for _, h := range hs {
					found = found || h == m[2] || strings.HasPrefix(h, m[2]+" ") || strings.HasPrefix(h, m[2]+":")
				}
				if !found {
					t.Errorf("%s:%d names %s %q, which has no such section", f, i+1, page, m[2])
				}
			}
		}
	}
}

// pageHeadings are the headings of the Markdown page at path
// (mdheadings.Of).
func pageHeadings(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	return mdheadings.Of(string(b))
}

// citingExts are the files besides Markdown that cite the docs' sections:
// Go comments and messages, manifests, the chart's templates and NOTES.txt,
// scripts.
var citingExts = map[string]bool{".go": true, ".yaml": true, ".yml": true, ".tpl": true, ".txt": true, ".json": true, ".sh": true}

// citingFiles are the repository's files with a citingExts extension, and
// its Makefile, build output left out.
func citingFiles(t *testing.T, root string) []string {
	return repoFiles(t, root, []string{"testdata"}, func(path string) bool {
		return citingExts[filepath.Ext(path)] || filepath.Base(path) == "Makefile"
	})
}
