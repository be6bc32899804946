package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the numeric user and group every capscale container runs as: no
// /etc/passwd is needed for a number, and the chart's runAsUser matches it.
const User = "65532:65532"

// Meta is what the image says about itself: its OCI labels and annotations.
type Meta struct {
	Version  string
	Revision string
	Source   string
	Created  time.Time
}

// labels are the org.opencontainers.image.* keys of the image config's
// labels and of every manifest's annotations.
func (m Meta) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "capscale",
		"org.opencontainers.image.description":   "capscale: underlay-IP scheduling, an external-metrics API, a workload API; one image, every binary",
		"org.opencontainers.image.version":       m.Version,
		"org.opencontainers.image.revision":      m.Revision,
		"org.opencontainers.image.source":        m.Source,
		"org.opencontainers.image.url":           m.Source,
		"org.opencontainers.image.documentation": m.Source + "/blob/" + m.Revision + "/docs/install.md",
		"org.opencontainers.image.created":       m.Created.UTC().Format(time.RFC3339),
	}
}

func imageCommand(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var (
		binDir    = fs.String("bin-dir", "", "directory with one subdirectory OS_ARCH of static binaries per platform")
		out       = fs.String("out", "_output/image", "OCI image layout to write (replaced)")
		platforms = fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated OS/ARCH list")
		push      = fs.String("push", "", "also push to this repository (REGISTRY/REPO), tagged with --version")
		insecure  = fs.Bool("insecure", false, "with --push: plain HTTP to the registry (a local test registry)")
		m         Meta
		epoch     = fs.Int64("created", 0, "image creation time, Unix seconds (the commit's time, so that a rebuild is identical); 0: SOURCE_DATE_EPOCH or now")
	)
	fs.StringVar(&m.Version, "version", "dev", "org.opencontainers.image.version, and the tag")
	fs.StringVar(&m.Revision, "revision", "", "org.opencontainers.image.revision (the git commit)")
	fs.StringVar(&m.Source, "source", "https://github.com/capscale/capscale", "org.opencontainers.image.source")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binDir == "" {
		return fmt.Errorf("--bin-dir is required")
	}
	m.Created = createdTime(*epoch)
	var plats []v1.Platform
	for _, p := range strings.Split(*platforms, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || os == "" || arch == "" {
			return fmt.Errorf("--platforms: %q is not OS/ARCH", p)
		}
		plats = append(plats, v1.Platform{OS: os, Architecture: arch})
	}
	res, err := Build(*binDir, plats, m)
	if err != nil {
		return err
	}
	if err := WriteLayout(*out, res, m.Version); err != nil {
		return err
	}
	d, _ := res.Index.Digest()
	fmt.Printf("wrote %s: index %s (%s)\n", *out, d, *platforms)
	for _, p := range res.Platforms {
		fmt.Printf("  %s/%s: %d binaries, %s compressed, %s uncompressed, SBOM %s\n", p.Platform.OS, p.Platform.Architecture,
			len(p.Binaries), mib(p.CompressedBytes), mib(p.UncompressedBytes), p.SBOM.Digest)
	}
	if *push != "" {
		return Push(*out, *push, m.Version, *insecure)
	}
	return nil
}

func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB" }

// createdTime is --created, else SOURCE_DATE_EPOCH, else now.
func createdTime(epoch int64) time.Time {
	if epoch == 0 {
		if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
			epoch, _ = strconv.ParseInt(s, 10, 64)
		}
	}
	if epoch == 0 {
		return time.Now().UTC().Truncate(time.Second)
	}
	return time.Unix(epoch, 0).UTC()
}

// PlatformImage is one platform's image and what went into it.
type PlatformImage struct {
	Platform          v1.Platform
	Image             v1.Image
	Binaries          []string
	CompressedBytes   int64
	UncompressedBytes int64
	SBOM              Artifact
}

// Result is the multi-platform index and, per platform, its image and SBOM.
type Result struct {
	Index     v1.ImageIndex
	Platforms []PlatformImage
}

// Build makes one image per platform from binDir/OS_ARCH/* — no base image:
// one layer per binary at /NAME, owned by root and not writable by the
// user the image runs as — and the index over them, each image with an
// SPDX SBOM generated from its binaries' embedded Go build information.
func Build(binDir string, plats []v1.Platform, m Meta) (*Result, error) {
	res := &Result{}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range plats {
		dir := filepath.Join(binDir, p.OS+"_"+p.Architecture)
		bins, err := binaries(dir)
		if err != nil {
			return nil, err
		}
		img, err := platformImage(dir, bins, p, m)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		pi := PlatformImage{Platform: p, Image: img, Binaries: bins}
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		for _, l := range layers {
			n, err := l.Size()
			if err != nil {
				return nil, err
			}
			pi.CompressedBytes += n
			rc, err := l.Uncompressed()
			if err != nil {
				return nil, err
			}
			u, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
			pi.UncompressedBytes += u
		}
		desc, err := descriptorOf(img, p)
		if err != nil {
			return nil, err
		}
		doc, err := SBOM(dir, bins, p, m, desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("SBOM for %s/%s: %w", p.OS, p.Architecture, err)
		}
		if pi.SBOM, err = NewSBOMArtifact(doc, desc, m); err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: *desc})
		res.Platforms = append(res.Platforms, pi)
	}
	res.Index = mutate.Annotations(idx, m.labels()).(v1.ImageIndex)
	return res, nil
}

// binaries lists the regular files of dir, sorted.
func binaries(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("binaries for the image: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("binaries for the image: %s is empty", dir)
	}
	sort.Strings(out)
	return out, nil
}

func platformImage(dir string, bins []string, p v1.Platform, m Meta) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	var adds []mutate.Addendum
	// /tmp, writable by anyone (sticky), for what a Go program may write
	// there; the chart mounts an emptyDir over it anyway.
	base, err := tarLayer([]tarEntry{{name: "tmp/", mode: 0o1777, dir: true}}, m.Created)
	if err != nil {
		return nil, err
	}
	adds = append(adds, mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: m.Created}, CreatedBy: "capscale hack/oci: /tmp", Comment: "no base image"}})
	for _, b := range bins {
		l, err := tarLayer([]tarEntry{{name: b, path: filepath.Join(dir, b), mode: 0o755}}, m.Created)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: m.Created}, CreatedBy: "capscale hack/oci: /" + b}})
	}
	img, err = mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: m.Created}
	cf.Author = "capscale"
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	// No entrypoint: each pod names its binary (/metrics-adapter, ...).
	cf.Config.Env = []string{"PATH=/"}
	cf.Config.Labels = m.labels()
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, m.labels()).(v1.Image), nil
}

func descriptorOf(img v1.Image, p v1.Platform) (*v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	n, err := img.Size()
	if err != nil {
		return nil, err
	}
	pp := p
	return &v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: d, Size: n, Platform: &pp}, nil
}

type tarEntry struct {
	name string
	path string // file to copy; empty for a directory
	mode int64
	dir  bool
}

// tarLayer is a gzip'd tar of entries with fixed owner (root) and times,
// so that the same binaries give the same layer digest.
func tarLayer(entries []tarEntry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			continue
		}
		b, err := os.ReadFile(e.path)
		if err != nil {
			return nil, err
		}
		h.Typeflag, h.Size = tar.TypeReg, int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteLayout writes res as an OCI image layout at dir (replacing it): the
// index tagged `tag` (org.opencontainers.image.ref.name), and each SBOM
// artifact beside it, whose subject is its platform's image.
func WriteLayout(dir string, res *Result, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(res.Index, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return err
	}
	for _, pi := range res.Platforms {
		if err := pi.SBOM.WriteTo(p); err != nil {
			return err
		}
	}
	return nil
}
