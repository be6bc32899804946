// Package docs generates the reference tables of capscale's documentation
// from the code: every flag of every binary, every capscale_* metric the
// components register, and the names of internal/names. The tables sit in
// the Markdown pages between markers,
//
//	<!-- BEGIN GENERATED: flags extender -->
//	...
//	<!-- END GENERATED -->
//
// `go run ./hack/gendocs` rewrites them; docs_test.go fails when a page
// differs from what would be generated, so nobody keeps them by hand.
package docs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Generated returns the text of every generated block by name ("flags
// extender", "metrics controller", "names", ...). root is the repository's
// root, for the sources read as text (internal/names/names.go).
func Generated(root string) (map[string]string, error) {
	out := map[string]string{}
	bins, err := Binaries()
	if err != nil {
		return nil, err
	}
	for _, b := range bins {
		out["flags "+b.Name] = FlagTable(b.Flags)
	}
	comps, err := Components()
	if err != nil {
		return nil, err
	}
	for _, c := range comps {
		out["metrics "+c.Name] = MetricTable(c.Metrics)
	}
	ns, err := Names(filepath.Join(root, "internal", "names", "names.go"))
	if err != nil {
		return nil, err
	}
	out["names"] = NameTable(ns)
	return out, nil
}

var (
	beginRE = regexp.MustCompile(`(?m)^<!-- BEGIN GENERATED: ([a-z0-9 -]+) -->\n`)
	endTag  = "<!-- END GENERATED -->"
)

// Blocks returns the blocks of page: name to the text between its markers.
func Blocks(page []byte) (map[string]string, error) {
	out := map[string]string{}
	for _, m := range beginRE.FindAllSubmatchIndex(page, -1) {
		name := string(page[m[2]:m[3]])
		rest := page[m[1]:]
		end := bytes.Index(rest, []byte(endTag))
		if end < 0 {
			return nil, fmt.Errorf("block %q has no %s", name, endTag)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("block %q appears twice", name)
		}
		out[name] = string(rest[:end])
	}
	return out, nil
}

// Rewrite returns page with every block replaced by gen's text for its name.
// A block gen does not know is an error: its table would never be checked.
func Rewrite(page []byte, gen map[string]string) ([]byte, error) {
	var b bytes.Buffer
	last := 0
	for _, m := range beginRE.FindAllSubmatchIndex(page, -1) {
		name := string(page[m[2]:m[3]])
		text, ok := gen[name]
		if !ok {
			return nil, fmt.Errorf("no generator for block %q", name)
		}
		end := bytes.Index(page[m[1]:], []byte(endTag))
		if end < 0 {
			return nil, fmt.Errorf("block %q has no %s", name, endTag)
		}
		b.Write(page[last:m[1]])
		b.WriteString(text)
		last = m[1] + end
	}
	b.Write(page[last:])
	return b.Bytes(), nil
}

// Pages returns the Markdown files under root/docs that hold a block.
func Pages(root string) ([]string, error) {
	var pages []string
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if beginRE.Match(b) {
			pages = append(pages, path)
		}
		return nil
	})
	sort.Strings(pages)
	return pages, err
}

// Update rewrites every page's blocks under root and returns the pages it
// changed.
func Update(root string) ([]string, error) {
	gen, err := Generated(root)
	if err != nil {
		return nil, err
	}
	pages, err := Pages(root)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, p := range pages {
		old, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		cur, err := Rewrite(old, gen)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if !bytes.Equal(old, cur) {
			if err := os.WriteFile(p, cur, 0o644); err != nil {
				return nil, err
			}
			changed = append(changed, p)
		}
	}
	return changed, nil
}

// RepoRoot is the directory holding go.mod, found upwards from the working
// directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// cell makes s safe in one Markdown table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// code renders s as inline code in a table cell ("" stays empty).
func code(s string) string {
	if s == "" {
		return ""
	}
	s = strings.ReplaceAll(s, "|", `\|`)
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

// Row is one table row's cells, as Markdown wrote them: inline code marks
// removed and `\|` unescaped.
type Row []string

// ParseTable returns the body rows of the first Markdown table in block
// (the header and its separator row skipped).
func ParseTable(block string) []Row {
	var rows []Row
	header := 0
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if header > 0 {
				break
			}
			continue
		}
		if header < 2 {
			header++
			continue
		}
		rows = append(rows, splitRow(line))
	}
	return rows
}

func splitRow(line string) Row {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells Row
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, uncode(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, uncode(cur.String()))
}

func uncode(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "`` ") && strings.HasSuffix(s, " ``") {
		return s[3 : len(s)-3]
	}
	if len(s) >= 2 && s[0] == '`' && s[len(s)-1] == '`' {
		return s[1 : len(s)-1]
	}
	return s
}
