package main

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"sigs.k8s.io/yaml"
)

// PluginName is the plugin's name in krew's index: `kubectl krew install
// capscale` installs `kubectl capscale`.
const PluginName = "capscale"

// DefaultPlatforms are the platforms a release is built for.
var DefaultPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}

// Archive is one packed platform build.
type Archive struct {
	OS, Arch string
	// Path is the archive on disk; SHA256 its hex digest.
	Path, SHA256 string
	// Bin is the binary's name inside the archive.
	Bin string
}

func binName(goos string) string {
	if goos == "windows" {
		return "kubectl-capscale.exe"
	}
	return "kubectl-capscale"
}

// semver is krew's version rule: v, then MAJOR.MINOR.PATCH and an optional
// pre-release or build suffix.
var semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

func checkVersion(v string) error {
	if !semver.MatchString(v) {
		return fmt.Errorf("--version=%q: krew needs a semantic version with a leading v, such as v0.1.0", v)
	}
	return nil
}

// Pack writes bin into an archive in dir (zip for Windows, tar.gz
// otherwise) and returns it with its digest.
func Pack(bin, dir, version, goos, goarch string) (Archive, error) {
	a := Archive{OS: goos, Arch: goarch, Bin: binName(goos)}
	ext := ".tar.gz"
	if goos == "windows" {
		ext = ".zip"
	}
	a.Path = filepath.Join(dir, fmt.Sprintf("kubectl-capscale_%s_%s_%s%s", version, goos, goarch, ext))
	data, err := os.ReadFile(bin)
	if err != nil {
		return a, err
	}
	f, err := os.Create(a.Path)
	if err != nil {
		return a, err
	}
	h := sha256.New()
	w := io.MultiWriter(f, h)
	if goos == "windows" {
		err = writeZip(w, a.Bin, data)
	} else {
		err = writeTarGz(w, a.Bin, data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	a.SHA256 = hex.EncodeToString(h.Sum(nil))
	return a, err
}

func writeTarGz(w io.Writer, name string, data []byte) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeZip(w io.Writer, name string, data []byte) error {
	zw := zip.NewWriter(w)
	hdr := &zip.FileHeader{Name: name, Method: zip.Deflate}
	hdr.SetMode(0o755)
	fw, err := zw.CreateHeader(hdr)
	if err != nil {
		return err
	}
	if _, err := fw.Write(data); err != nil {
		return err
	}
	return zw.Close()
}

// The krew Plugin manifest (krew.googlecontainertools.github.com/v1alpha2),
// the fields krew-index reads.
type (
	Plugin struct {
		APIVersion string     `json:"apiVersion"`
		Kind       string     `json:"kind"`
		Metadata   Metadata   `json:"metadata"`
		Spec       PluginSpec `json:"spec"`
	}
	Metadata struct {
		Name string `json:"name"`
	}
	PluginSpec struct {
		Version          string     `json:"version"`
		Homepage         string     `json:"homepage"`
		ShortDescription string     `json:"shortDescription"`
		Description      string     `json:"description"`
		Platforms        []Platform `json:"platforms"`
	}
	Platform struct {
		Selector Selector   `json:"selector"`
		URI      string     `json:"uri"`
		SHA256   string     `json:"sha256"`
		Files    []FileCopy `json:"files"`
		Bin      string     `json:"bin"`
	}
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	}
	FileCopy struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
)

// Manifest renders the krew manifest for archives published under
// baseURL/version/.
func Manifest(version, baseURL string, archives []Archive) ([]byte, error) {
	if err := checkVersion(version); err != nil {
		return nil, err
	}
	p := Plugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   Metadata{Name: PluginName},
		Spec: PluginSpec{
			Version:          version,
			Homepage:         "https://github.com/capscale/capscale",
			ShortDescription: "Show underlay IPs per node; stop, start and scale workloads",
			Description: `kubectl capscale shows, for every node, the underlay IPs
(capscale.io/underlay-ip) its capacity allows, those its pods hold and those
free, with the pods waiting for one, by the same rule capscale's scheduling
modes apply. It also stops a Deployment or StatefulSet remembering its
replicas, starts it again, restarts it, and scales it (to a count or to the
most the cluster can place), HPA-aware, acting as you.
`,
		},
	}
	for _, a := range archives {
		p.Spec.Platforms = append(p.Spec.Platforms, Platform{
			Selector: Selector{MatchLabels: map[string]string{"os": a.OS, "arch": a.Arch}},
			URI:      fmt.Sprintf("%s/%s/%s", baseURL, version, filepath.Base(a.Path)),
			SHA256:   a.SHA256,
			Files:    []FileCopy{{From: a.Bin, To: "."}},
			Bin:      a.Bin,
		})
	}
	return yaml.Marshal(p)
}
