// Command release builds kubectl-capscale for each platform, packs each
// binary in a tar.gz (a zip for Windows, as krew expects), and writes the
// krew plugin manifest (capscale.yaml, krew-index's Plugin format) whose
// sha256 sums are those of the archives it just packed. Run it with
// `make release`.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	var (
		version   = flag.String("version", "", "release version, a semver with a leading v (v0.1.0)")
		out       = flag.String("out", "_output/release", "directory for the archives and capscale.yaml")
		platforms = flag.String("platforms", strings.Join(DefaultPlatforms, ","), "comma-separated OS/ARCH list")
		baseURL   = flag.String("base-url", "https://github.com/capscale/capscale/releases/download", "where the archives are published; the URI is BASE/VERSION/ARCHIVE")
		ldflags   = flag.String("ldflags", "", "extra -ldflags for go build")
	)
	flag.Parse()
	if err := run(*version, *out, *platforms, *baseURL, *ldflags); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(version, out, platforms, baseURL, ldflags string) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var archives []Archive
	for _, p := range strings.Split(platforms, ",") {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || goos == "" || goarch == "" {
			return fmt.Errorf("--platforms: %q is not OS/ARCH", p)
		}
		bin := filepath.Join(out, "build", goos+"_"+goarch, binName(goos))
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w "+ldflags), "-o", bin, "./cmd/kubectl-capscale")
		cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		fmt.Printf("building kubectl-capscale %s for %s/%s\n", version, goos, goarch)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building for %s/%s: %w", goos, goarch, err)
		}
		a, err := Pack(bin, out, version, goos, goarch)
		if err != nil {
			return err
		}
		archives = append(archives, a)
	}
	m, err := Manifest(version, baseURL, archives)
	if err != nil {
		return err
	}
	path := filepath.Join(out, PluginName+".yaml")
	if err := os.WriteFile(path, m, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}
