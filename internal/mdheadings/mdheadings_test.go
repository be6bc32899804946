package mdheadings

import (
	"slices"
	"testing"
)

// TestOf: headings outside fenced code, without marks, backticks and link
// targets.
func TestOf(t *testing.T) {
	text := "# Title\n\ntext\n```sh\n# a comment, not a heading\n```\n## The `--flag` and [a link](x.md#y)\n"
	want := []string{"Title", "The --flag and a link"}
	if got := Of(text); !slices.Equal(got, want) {
		t.Fatalf("Of = %q, want %q", got, want)
	}
}
