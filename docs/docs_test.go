package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const rerun = "run `go run ./hack/gendocs` to regenerate it"

// pageBlocks reads every generated block of the docs pages, by name, with
// the page it is on.
func pageBlocks(t *testing.T) (blocks map[string]string, pageOf map[string]string) {
	t.Helper()
	pages, err := Pages("..")
	if err != nil {
		t.Fatal(err)
	}
	blocks, pageOf = map[string]string{}, map[string]string{}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := Blocks(b)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for name, text := range bs {
			if other, dup := pageOf[name]; dup {
				t.Errorf("block %q is on %s and %s", name, other, p)
			}
			blocks[name], pageOf[name] = text, filepath.ToSlash(strings.TrimPrefix(p, "../"))
		}
	}
	return blocks, pageOf
}

// tableRows returns the block's text and its rows keyed by key(row); a key
// seen twice is an error.
func tableRows(t *testing.T, blocks, pageOf map[string]string, name string, key func(Row) string) (string, map[string]Row) {
	t.Helper()
	block, ok := blocks[name]
	if !ok {
		t.Fatalf("no page has the block <!-- BEGIN GENERATED: %s -->", name)
	}
	rows := map[string]Row{}
	for _, r := range ParseTable(block) {
		k := key(r)
		if _, dup := rows[k]; dup {
			t.Errorf("%s: two rows for %s; %s", pageOf[name], k, rerun)
		}
		rows[k] = r
	}
	return block, rows
}

// TestFlagTables: each binary's table has exactly one row per flag, with its
// default as pflag prints it, and no row for a flag the binary lacks.
func TestFlagTables(t *testing.T) {
	t.Setenv("TMPDIR", "/tmp") // --cert-dir's default is under os.TempDir()
	blocks, pageOf := pageBlocks(t)
	bins, err := Binaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bins {
		t.Run(b.Name, func(t *testing.T) {
			name := "flags " + b.Name
			block, rows := tableRows(t, blocks, pageOf, name, func(r Row) string { return FlagName(r[0]) })
			for _, f := range b.Flags {
				r, ok := rows[f.Name]
				switch {
				case !ok:
					t.Errorf("%s: no row for --%s (default %q); %s", pageOf[name], f.Name, f.Default, rerun)
				case len(r) < 2 || r[1] != f.Default:
					t.Errorf("%s: --%s has the row %q on the page, default %q in the code; %s", pageOf[name], f.Name, r, f.Default, rerun)
				}
				delete(rows, f.Name)
			}
			for n := range rows {
				t.Errorf("%s: a row for --%s, which %s does not have; %s", pageOf[name], n, b.Name, rerun)
			}
			if want := FlagTable(b.Flags); block != want {
				t.Errorf("%s: the table of %s differs from the code's flags (help text or order); %s", pageOf[name], b.Name, rerun)
			}
		})
	}
}

// TestMetricTables: each component's table lists exactly the capscale_*
// metrics it registers, with their type and labels.
func TestMetricTables(t *testing.T) {
	blocks, pageOf := pageBlocks(t)
	comps, err := Components()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range comps {
		total += len(c.Metrics)
		t.Run(c.Name, func(t *testing.T) {
			name := "metrics " + c.Name
			block, rows := tableRows(t, blocks, pageOf, name, func(r Row) string { return r[0] })
			for _, m := range c.Metrics {
				r, ok := rows[m.Name]
				want := Row{m.Name, m.Type, strings.Join(m.Labels, "`, `")}
				switch {
				case !ok:
					t.Errorf("%s: no row for %s; %s", pageOf[name], m.Name, rerun)
				case len(r) < 3 || r[1] != want[1] || r[2] != want[2]:
					t.Errorf("%s: %s is %q on the page, %q in the code; %s", pageOf[name], m.Name, r, want[:3], rerun)
				}
				delete(rows, m.Name)
			}
			for n := range rows {
				t.Errorf("%s: a row for %s, which %s does not register; %s", pageOf[name], n, c.Name, rerun)
			}
			if want := MetricTable(c.Metrics); block != want {
				t.Errorf("%s: the table of %s's metrics differs from the code (help text); %s", pageOf[name], c.Name, rerun)
			}
		})
	}
	if total < 20 {
		t.Errorf("only %d capscale metrics found; the components' constructors changed?", total)
	}
}

// TestNameTable: the names table matches internal/names/names.go.
func TestNameTable(t *testing.T) {
	blocks, pageOf := pageBlocks(t)
	ns, err := Names(filepath.Join("..", "internal", "names", "names.go"))
	if err != nil {
		t.Fatal(err)
	}
	block, rows := tableRows(t, blocks, pageOf, "names", func(r Row) string {
		if len(r) < 2 {
			return ""
		}
		return r[1]
	})
	for _, n := range ns {
		r, ok := rows["names."+n.Const]
		switch {
		case !ok:
			t.Errorf("%s: no row for names.%s; %s", pageOf["names"], n.Const, rerun)
		case r[0] != n.Value:
			t.Errorf("%s: names.%s is %q on the page, %q in the code; %s", pageOf["names"], n.Const, r[0], n.Value, rerun)
		}
		delete(rows, "names."+n.Const)
	}
	for c := range rows {
		t.Errorf("%s: a row for %s, which internal/names does not have; %s", pageOf["names"], c, rerun)
	}
	if block != NameTable(ns) {
		t.Errorf("%s: the names table differs from internal/names/names.go (doc comments); %s", pageOf["names"], rerun)
	}
}

// TestEveryBlockHasAGenerator: a block no generator knows would never be
// checked.
func TestEveryBlockHasAGenerator(t *testing.T) {
	t.Setenv("TMPDIR", "/tmp")
	gen, err := Generated("..")
	if err != nil {
		t.Fatal(err)
	}
	blocks, pageOf := pageBlocks(t)
	for name := range blocks {
		if _, ok := gen[name]; !ok {
			t.Errorf("%s: block %q has no generator", pageOf[name], name)
		}
	}
	for name := range gen {
		if _, ok := blocks[name]; !ok {
			t.Errorf("no page has the block <!-- BEGIN GENERATED: %s -->", name)
		}
	}
}

func TestParseTable(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		want        []Row
	}{
		{name: "plain", block: "| a | b |\n|---|---|\n| `--x` | `1` |\n", want: []Row{{"--x", "1"}}},
		{name: "empty cell and pipe", block: "| a | b |\n|---|---|\n| `--x` |  |\n| y | `a\\|b` |\n", want: []Row{{"--x", ""}, {"y", "a|b"}}},
		{name: "backtick in code", block: "| a |\n|---|\n| `` a`b `` |\n", want: []Row{{"a`b"}}},
		{name: "stops after the table", block: "| a |\n|---|\n| 1 |\n\ntext\n| 2 |\n", want: []Row{{"1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseTable(tc.block)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for i := range got {
				if strings.Join(got[i], "\x00") != strings.Join(tc.want[i], "\x00") {
					t.Errorf("row %d: got %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
