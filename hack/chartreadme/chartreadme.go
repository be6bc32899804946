// Package chartreadme writes the values table of the chart's README
// (deploy/helm/capscale/README.md) from values.yaml and its comments, so
// that the table cannot say other than the file: each key's description is
// the last paragraph of the comment above it, its default the value in the
// file. Regenerate with: go run ./hack/genchartreadme
package chartreadme

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Paths of the chart's values file and README, from the repository root.
const (
	ValuesPath = "deploy/helm/capscale/values.yaml"
	ReadmePath = "deploy/helm/capscale/README.md"
)

var block = regexp.MustCompile(`(?s)(<!-- BEGIN GENERATED: values -->\n).*?(<!-- END GENERATED -->)`)

// Table renders the values table of values (a values.yaml).
func Table(values []byte) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return "", fmt.Errorf("parsing values: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("values is not a mapping")
	}
	var b strings.Builder
	b.WriteString("| key | default | description |\n|---|---|---|\n")
	if err := rows(&b, "", doc.Content[0]); err != nil {
		return "", err
	}
	return b.String(), nil
}

// rows writes a row for every key of m: a leaf (a scalar, a list, a flow or
// empty map) with its default, a block map with its description only, then
// its keys.
func rows(b *strings.Builder, prefix string, m *yaml.Node) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + k.Value
		desc := cell(lastParagraph(k.HeadComment))
		nested := v.Kind == yaml.MappingNode && v.Style&yaml.FlowStyle == 0 && len(v.Content) > 0
		if nested {
			if desc != "" {
				fmt.Fprintf(b, "| `%s` |  | %s |\n", key, desc)
			}
			if err := rows(b, key+".", v); err != nil {
				return err
			}
			continue
		}
		def, err := flow(v)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", key, def, desc)
	}
	return nil
}

// lastParagraph is a key's own comment: the last paragraph of the comment
// above it (yaml.v3 keeps no blank line, so a line "#" alone ends a group's
// comment), without example lines (indented under "#").
func lastParagraph(comment string) string {
	var words []string
	for _, line := range strings.Split(comment, "\n") {
		line = strings.TrimSpace(line)
		text := strings.TrimPrefix(line, "#")
		switch {
		case strings.TrimSpace(text) == "":
			words = nil
		case strings.HasPrefix(text, "  "):
		default:
			words = append(words, strings.TrimSpace(text))
		}
	}
	return strings.Join(words, " ")
}

// flow renders a default on one line, in YAML's flow style.
func flow(v *yaml.Node) (string, error) {
	c := *v
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	setFlow(&c)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return "", err
	}
	s := strings.TrimSpace(buf.String())
	if s == "" || s == "''" {
		s = `""`
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`", nil
}

func setFlow(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style |= yaml.FlowStyle
	}
	content := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		cc := *c
		cc.HeadComment, cc.LineComment, cc.FootComment = "", "", ""
		setFlow(&cc)
		content[i] = &cc
	}
	n.Content = content
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Rewrite returns readme with its values block replaced by table.
func Rewrite(readme []byte, table string) ([]byte, error) {
	if !block.Match(readme) {
		return nil, fmt.Errorf("%s has no <!-- BEGIN GENERATED: values --> ... <!-- END GENERATED --> block", ReadmePath)
	}
	return block.ReplaceAllLiteral(readme, []byte("<!-- BEGIN GENERATED: values -->\n"+table+"<!-- END GENERATED -->")), nil
}

// Update rewrites the README under root from its values.yaml and reports
// whether it changed.
func Update(root string) (bool, error) {
	values, err := os.ReadFile(filepath.Join(root, ValuesPath))
	if err != nil {
		return false, err
	}
	readme, err := os.ReadFile(filepath.Join(root, ReadmePath))
	if err != nil {
		return false, err
	}
	table, err := Table(values)
	if err != nil {
		return false, err
	}
	out, err := Rewrite(readme, table)
	if err != nil || bytes.Equal(out, readme) {
		return false, err
	}
	return true, os.WriteFile(filepath.Join(root, ReadmePath), out, 0o644)
}
