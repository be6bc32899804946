package deploy

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var promMetricName = regexp.MustCompile(`\bcapscale_[a-zA-Z0-9_]+`)

// TestGrafanaDashboard: the dashboard is valid JSON, and its queries use
// only metrics that capscale's Go code defines, and every one of them.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if d.UID != "capscale" || d.SchemaVersion != 39 || d.Title == "" {
		t.Errorf("uid %q, schemaVersion %d, title %q; want uid capscale, schemaVersion 39", d.UID, d.SchemaVersion, d.Title)
	}

	defined, histograms := goMetricNames(t)
	if len(defined) < 20 {
		t.Fatalf("found only %d capscale metrics in the Go sources: %v", len(defined), defined)
	}
	t.Logf("%d capscale metrics in the Go sources (histograms: %d)", len(defined), len(histograms))
	used := map[string]bool{}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				names := promMetricName.FindAllString(tg.Expr, -1)
				if len(names) == 0 {
					t.Errorf("panel %q: query %q uses no capscale metric", p.Title, tg.Expr)
				}
				for _, n := range names {
					base := n
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						if b, ok := strings.CutSuffix(n, suffix); ok && histograms[b] {
							base = b
						}
					}
					if !defined[base] {
						t.Errorf("panel %q: %s is not a metric the Go sources define", p.Title, n)
					}
					used[base] = true
				}
			}
		}
	}
	walk(d.Panels)
	for n := range defined {
		if !used[n] {
			t.Errorf("%s is not on the dashboard", n)
		}
	}
}

// goMetricNames parses capscale's non-test Go sources and returns the full
// name of every Prometheus metric they define with a capscale_ prefix: the
// Namespace/Subsystem/Name of prometheus.*Opts literals (constants and
// function parameters resolved to the string literals given to them) and
// the first argument of prometheus.NewDesc. histograms holds those defined
// with HistogramOpts.
func goMetricNames(t *testing.T) (names, histograms map[string]bool) {
	t.Helper()
	root := repoRoot(t)
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "e2e", "_output", "vendor", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Calls by function name, to resolve a parameter to its arguments.
	calls := map[string][]*ast.CallExpr{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				switch fn := c.Fun.(type) {
				case *ast.Ident:
					calls[fn.Name] = append(calls[fn.Name], c)
				case *ast.SelectorExpr:
					calls[fn.Sel.Name] = append(calls[fn.Sel.Name], c)
				}
			}
			return true
		})
	}
	literal := func(e ast.Expr) (string, bool) {
		if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING {
			s, err := strconv.Unquote(l.Value)
			return s, err == nil
		}
		return "", false
	}

	names, histograms = map[string]bool{}, map[string]bool{}
	for _, f := range files {
		consts := map[string]string{}
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == len(vs.Values) {
				for i, id := range vs.Names {
					if s, ok := literal(vs.Values[i]); ok {
						consts[id.Name] = s
					}
				}
			}
			return true
		})
		// resolve gives the values an Opts field can have inside fn.
		resolve := func(e ast.Expr, fn *ast.FuncDecl) []string {
			if s, ok := literal(e); ok {
				return []string{s}
			}
			id, ok := e.(*ast.Ident)
			if !ok {
				return nil
			}
			if s, ok := consts[id.Name]; ok {
				return []string{s}
			}
			if fn == nil {
				return nil
			}
			i := 0
			for _, field := range fn.Type.Params.List {
				for _, pn := range field.Names {
					if pn.Name == id.Name {
						var vals []string
						for _, c := range calls[fn.Name.Name] {
							if i < len(c.Args) {
								if s, ok := literal(c.Args[i]); ok {
									vals = append(vals, s)
								}
							}
						}
						return vals
					}
					i++
				}
			}
			return nil
		}
		visit := func(n ast.Node, fn *ast.FuncDecl) {
			switch x := n.(type) {
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewDesc" && len(x.Args) > 0 {
					if s, ok := literal(x.Args[0]); ok && strings.HasPrefix(s, "capscale_") {
						names[s] = true
					}
				}
			case *ast.CompositeLit:
				sel, ok := x.Type.(*ast.SelectorExpr)
				if !ok {
					return
				}
				switch sel.Sel.Name {
				case "CounterOpts", "GaugeOpts", "HistogramOpts", "SummaryOpts":
				default:
					return
				}
				parts := map[string][]string{"Namespace": {""}, "Subsystem": {""}, "Name": nil}
				for _, el := range x.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					k, ok := kv.Key.(*ast.Ident)
					if !ok {
						continue
					}
					if _, want := parts[k.Name]; !want {
						continue
					}
					vals := resolve(kv.Value, fn)
					if len(vals) == 0 {
						t.Errorf("%s: cannot resolve %s of a metric to a string", fset.Position(kv.Pos()), k.Name)
					}
					parts[k.Name] = vals
				}
				for _, ns := range parts["Namespace"] {
					for _, sub := range parts["Subsystem"] {
						for _, name := range parts["Name"] {
							fq := prometheus.BuildFQName(ns, sub, name)
							if strings.HasPrefix(fq, "capscale_") {
								names[fq] = true
								if sel.Sel.Name == "HistogramOpts" {
									histograms[fq] = true
								}
							}
						}
					}
				}
			}
		}
		for _, decl := range f.Decls {
			fn, _ := decl.(*ast.FuncDecl)
			ast.Inspect(decl, func(n ast.Node) bool {
				visit(n, fn)
				return true
			})
		}
	}
	return names, histograms
}
