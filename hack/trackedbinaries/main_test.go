package main

import (
	"bytes"
	"encoding/binary"
	"go/build"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// pe is a minimal PE header: "MZ", e_lfanew at 0x3c pointing at 0x80, and
// the "PE\0\0" signature there.
func pe(sig string) []byte {
	b := make([]byte, 0x84)
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[0x3c:], 0x80)
	copy(b[0x80:], sig)
	return b
}

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   []byte
		binary bool
	}{
		{name: "ELF", data: []byte("\x7fELF\x02\x01\x01\x00"), binary: true},
		{name: "Mach-O 64-bit little-endian", data: []byte("\xcf\xfa\xed\xfe\x07\x00\x00\x01"), binary: true},
		{name: "Mach-O 32-bit big-endian", data: []byte("\xfe\xed\xfa\xce\x00\x00\x00\x12"), binary: true},
		{name: "Mach-O universal", data: []byte("\xca\xfe\xba\xbe\x00\x00\x00\x02"), binary: true},
		{name: "PE", data: pe("PE\x00\x00"), binary: true},
		{name: "Go archive", data: []byte("!<arch>\n__.PKGDEF       0           0     0     644     1234      `\n"), binary: true},
		{name: "Go object", data: []byte("go object linux amd64 go1.26.8 X:none\n"), binary: true},
		{name: "WebAssembly", data: []byte("\x00asm\x01\x00\x00\x00"), binary: true},
		{name: "PNG", data: []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")},
		{name: "CSV", data: []byte("second,binds,pending\n0,12,3\n")},
		{name: "Go source", data: []byte("package main\n")},
		{name: "text starting with MZ, no PE signature", data: pe("no!!")},
		{name: "short text starting with MZ", data: []byte("MZ is a prefix")},
		{name: "empty", data: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, err := Kind(bytes.NewReader(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if (kind != "") != tc.binary {
				t.Errorf("Kind = %q, want a binary: %v", kind, tc.binary)
			}
		})
	}
}

// TestKindOfThisTestBinary: the test binary itself, whatever the platform's
// format, is caught.
func TestKindOfThisTestBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	kind, err := fileKind(exe)
	if err != nil {
		t.Fatal(err)
	}
	if kind == "" {
		t.Errorf("%s: not recognised as a compiled binary", exe)
	}
}

// TestGitignoreCoversGoBuildOutputs: every binary `go build` writes without
// -o — `go build ./cmd/x` at its module's root, or `go build` inside a
// main package's directory — is ignored, so that `git add .` does not pick
// it up. Where a directory of that name is at the module's root (extender/,
// controller/), go build refuses to write there, and nothing is needed.
func TestGitignoreCoversGoBuildOutputs(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree: %v", err)
	}
	top := strings.TrimSpace(string(root))
	// Every directory of a main package, in every module of the repository
	// (the tool modules too), as go/build reads it for this platform.
	var mains []string
	err = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		switch d.Name() {
		case ".git", "_output", "testdata", "node_modules":
			return filepath.SkipDir
		}
		pkg, err := build.Default.ImportDir(p, 0)
		if err != nil || pkg.Name != "main" {
			return nil // no Go files, or not a command
		}
		rel, err := filepath.Rel(top, p)
		if err != nil {
			return err
		}
		mains = append(mains, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mains) < 5 {
		t.Fatalf("found only %d main packages: %v", len(mains), mains)
	}
	// go build ./x writes x's binary in the working directory, which is the
	// package's own directory or, usually, its module's root.
	var outputs []string
	for _, dir := range mains {
		name := path.Base(dir)
		outputs = append(outputs, dir+"/"+name)
		mod := moduleRoot(t, top, dir)
		if mod == dir {
			continue
		}
		if fi, err := os.Stat(filepath.Join(top, mod, name)); err == nil && fi.IsDir() {
			continue
		}
		outputs = append(outputs, path.Join(mod, name))
	}
	for _, out := range outputs {
		cmd := exec.Command("git", "check-ignore", "-q", "--no-index", out)
		cmd.Dir = top
		if err := cmd.Run(); err != nil {
			t.Errorf("%s (what go build writes without -o) is not ignored by .gitignore", out)
		}
	}
}

// moduleRoot is the directory, relative to top, of the go.mod nearest above
// dir.
func moduleRoot(t *testing.T, top, dir string) string {
	t.Helper()
	for d := dir; ; d = path.Dir(d) {
		if _, err := os.Stat(filepath.Join(top, d, "go.mod")); err == nil {
			return d
		}
		if d == "." || d == "/" {
			t.Fatalf("%s: no go.mod above it", dir)
		}
	}
}
