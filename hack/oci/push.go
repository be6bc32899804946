package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func pushCommand(args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	dir := fs.String("layout", "_output/image", "OCI image layout written by `oci image`")
	repo := fs.String("repo", "", "repository to push to (REGISTRY/REPO)")
	tag := fs.String("tag", "", "tag of the index; empty: its org.opencontainers.image.ref.name in the layout")
	insecure := fs.Bool("insecure", false, "plain HTTP to the registry (a local test registry)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *repo == "" {
		return fmt.Errorf("--repo is required")
	}
	return Push(*dir, *repo, *tag, *insecure)
}

func ioNopCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// Push copies an OCI layout written by WriteLayout to repo: the image index
// under tag (or the tag the layout names), then each SBOM artifact by
// digest. go-containerregistry records each artifact as a referrer of its
// subject: through the registry's referrers API, or, where a registry lacks
// it, in the referrers tag sha256-<subject digest> (OCI distribution 1.1).
func Push(dir, repo, tag string, insecure bool) error {
	var nameOpts []name.Option
	if insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.NewRepository(repo, nameOpts...)
	if err != nil {
		return err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return err
	}
	var pushed int
	for _, d := range im.Manifests {
		switch {
		case d.MediaType == types.OCIImageIndex:
			t := tag
			if t == "" {
				t = d.Annotations["org.opencontainers.image.ref.name"]
			}
			if t == "" {
				return fmt.Errorf("%s: the index %s has no tag: give --tag", dir, d.Digest)
			}
			idx, err := top.ImageIndex(d.Digest)
			if err != nil {
				return err
			}
			if err := remote.WriteIndex(r.Tag(t), idx); err != nil {
				return fmt.Errorf("pushing %s:%s: %w", repo, t, err)
			}
			fmt.Printf("pushed %s:%s (%s)\n", repo, t, d.Digest)
			pushed++
		case d.ArtifactType != "":
			a, err := readArtifact(p, d)
			if err != nil {
				return err
			}
			for h, b := range a.Blobs {
				if err := remote.WriteLayer(r, static.NewLayer(b, types.MediaType("application/octet-stream"))); err != nil {
					return fmt.Errorf("pushing blob %s: %w", h, err)
				}
			}
			if err := remote.Put(r.Digest(a.Digest.String()), a); err != nil {
				return fmt.Errorf("pushing artifact %s: %w", a.Digest, err)
			}
			fmt.Printf("pushed %s@%s (%s)\n", repo, a.Digest, d.ArtifactType)
		}
	}
	if pushed == 0 {
		return fmt.Errorf("%s holds no image index", dir)
	}
	return nil
}

// readArtifact reads an artifact manifest and its blobs back from a layout.
func readArtifact(p layout.Path, d v1.Descriptor) (Artifact, error) {
	raw, err := p.Bytes(d.Digest)
	if err != nil {
		return Artifact{}, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return Artifact{}, err
	}
	a := Artifact{Manifest: raw, Digest: d.Digest, Blobs: map[v1.Hash][]byte{}}
	for _, bd := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		b, err := p.Bytes(bd.Digest)
		if err != nil {
			return Artifact{}, err
		}
		a.Blobs[bd.Digest] = b
	}
	return a, nil
}
