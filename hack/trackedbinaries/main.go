// Command trackedbinaries fails when a file git tracks is a compiled
// binary: an ELF, Mach-O, PE or WebAssembly executable or object, or an ar
// archive (Go's package archives and object files, C static libraries).
// `make lint` runs it, so that a binary `go build` left in the work tree and
// a careless `git add .` picked up never reaches main. Images, CSVs and other
// data files are not executables and pass.
//
// It reads the work tree's copy of each path `git ls-files` lists; a tracked
// file deleted from the work tree is skipped.
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
)

func main() {
	os.Exit(run(os.Stdout, os.Stderr))
}

// run lists git's tracked files and reports each compiled binary; its exit
// code is 1 when it found one, 2 when it could not look.
func run(stdout, stderr io.Writer) int {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		fmt.Fprintf(stderr, "trackedbinaries: listing git's tracked files: %v\n", err)
		return 2
	}
	found := 0
	for _, path := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if path == "" {
			continue
		}
		kind, err := fileKind(path)
		if err != nil {
			fmt.Fprintf(stderr, "trackedbinaries: %v\n", err)
			return 2
		}
		if kind != "" {
			fmt.Fprintf(stdout, "%s: %s tracked by git; remove it (git rm --cached) and ignore it in .gitignore\n", path, kind)
			found++
		}
	}
	if found > 0 {
		fmt.Fprintf(stdout, "%d compiled binary file(s) tracked by git\n", found)
		return 1
	}
	return 0
}

// fileKind reads the start of a file and returns Kind of it; a path that is
// not a regular file (a deleted file, a symlink, a submodule) is "".
func fileKind(path string) (string, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return Kind(f)
}

// headerSize is enough for every magic number below and a PE header's
// offset field.
const headerSize = 64

// Kind names the kind of compiled binary r holds, or "" if it is none of
// them. It reads the magic numbers at the start and, for a DOS "MZ" header,
// checks the "PE\0\0" signature its e_lfanew field points at, so that a
// text file that happens to start with "MZ" passes.
func Kind(r io.ReaderAt) (string, error) {
	head := make([]byte, headerSize)
	n, err := r.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading a file's header: %w", err)
	}
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF binary", nil
	case hasAnyPrefix(head, "\xfe\xed\xfa\xce", "\xfe\xed\xfa\xcf", "\xce\xfa\xed\xfe", "\xcf\xfa\xed\xfe"):
		return "Mach-O binary", nil
	case bytes.HasPrefix(head, []byte("\xca\xfe\xba\xbe")):
		// A universal Mach-O and a Java class file share the magic number;
		// both are compiled.
		return "Mach-O universal binary or Java class", nil
	case bytes.HasPrefix(head, []byte("!<arch>\n")):
		return "ar archive (a Go package archive or object, or a static library)", nil
	case bytes.HasPrefix(head, []byte("go object ")):
		return "Go object file", nil
	case bytes.HasPrefix(head, []byte("\x00asm")):
		return "WebAssembly module", nil
	case bytes.HasPrefix(head, []byte("MZ")) && len(head) >= 0x40:
		sig := make([]byte, 4)
		off := int64(binary.LittleEndian.Uint32(head[0x3c:]))
		if _, err := r.ReadAt(sig, off); err == nil && string(sig) == "PE\x00\x00" {
			return "PE (Windows) binary", nil
		}
	}
	return "", nil
}

func hasAnyPrefix(b []byte, prefixes ...string) bool {
	for _, p := range prefixes {
		if bytes.HasPrefix(b, []byte(p)) {
			return true
		}
	}
	return false
}
