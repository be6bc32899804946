package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
)

// Name is one exported string constant of internal/names.
type Name struct {
	Const string
	Value string
	// Doc is its doc comment, or the comment of the group it is written
	// in (consecutive constants under one comment share it).
	Doc string
}

// Names reads the exported string constants of file (internal/names/names.go)
// in source order, with their doc comments.
func Names(file string) ([]Name, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []Name
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		var doc string
		prevEnd := -1
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			line := fset.Position(vs.Pos()).Line
			switch {
			case vs.Doc != nil:
				doc = vs.Doc.Text()
			case prevEnd >= 0 && line == prevEnd+1:
				// continues the group above: same comment
			default:
				doc = ""
			}
			prevEnd = fset.Position(vs.End()).Line
			for i, id := range vs.Names {
				if !id.IsExported() || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return nil, fmt.Errorf("%s: %s is not a string literal", fset.Position(id.Pos()), id.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					return nil, err
				}
				out = append(out, Name{Const: id.Name, Value: v, Doc: strings.TrimSpace(doc)})
			}
		}
	}
	return out, nil
}

// NameTable is the Markdown table of names: value, constant, doc comment.
func NameTable(ns []Name) string {
	var b strings.Builder
	b.WriteString("| value | constant | meaning |\n|---|---|---|\n")
	for _, n := range ns {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", code(n.Value), code("names."+n.Const), cell(n.Doc))
	}
	return b.String()
}
