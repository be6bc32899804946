package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SPDXMediaType is the media type of the SBOM blob and the artifactType of
// the manifest that carries it (what `oras discover`, `cosign tree` and the
// OCI referrers API filter on).
const SPDXMediaType = "application/spdx+json"

// The OCI 1.1 empty descriptor: the config of an artifact that has none.
var emptyJSON = []byte("{}")

const emptyMediaType = "application/vnd.oci.empty.v1+json"

// spdxDoc is the part of SPDX 2.3 (JSON) this SBOM fills.
type spdxDoc struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string         `json:"name"`
	SPDXID           string         `json:"SPDXID"`
	VersionInfo      string         `json:"versionInfo,omitempty"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	PrimaryPurpose   string         `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
	Comment          string         `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(kind, name string) string {
	return "SPDXRef-" + kind + "-" + spdxIDUnsafe.ReplaceAllString(name, "-")
}

// SBOM is an SPDX 2.3 document for one platform's image: the image, each
// binary in it (with its SHA-256), and each Go module a binary was built
// from, as its embedded build information (debug/buildinfo, what
// `go version -m` prints) records them — the main module, every dependency
// at the version linked (after replace directives), and the Go toolchain.
func SBOM(dir string, bins []string, p v1.Platform, m Meta, image v1.Hash) ([]byte, error) {
	plat := p.OS + "-" + p.Architecture
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "capscale-" + m.Version + "-" + plat,
		DocumentNamespace: m.Source + "/sbom/" + m.Version + "/" + plat + "/" + image.Hex,
		CreationInfo:      spdxCreation{Created: m.Created.UTC().Format("2006-01-02T15:04:05Z"), Creators: []string{"Organization: capscale", "Tool: capscale-hack-oci"}},
	}
	imgID := "SPDXRef-Image"
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: "capscale", SPDXID: imgID, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
		PrimaryPurpose: "CONTAINER",
		Checksums:      []spdxChecksum{{Algorithm: "SHA256", Value: image.Hex}},
		ExternalRefs: []spdxRef{{Category: "PACKAGE-MANAGER", Type: "purl",
			Locator: "pkg:oci/capscale@" + image.String() + "?arch=" + p.Architecture + "&os=" + p.OS}},
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", imgID})
	seen := map[string]bool{}
	for _, b := range bins {
		path := filepath.Join(dir, b)
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		info, err := buildinfo.Read(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%s has no Go build information (built without modules?): %w", b, err)
		}
		sum := sha256.Sum256(raw)
		binID := spdxID("File", b)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: "/" + b, SPDXID: binID, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
			PrimaryPurpose: "APPLICATION",
			Checksums:      []spdxChecksum{{Algorithm: "SHA256", Value: hex.EncodeToString(sum[:])}},
			Comment:        "Go " + info.GoVersion + ", package " + info.Path + ", " + settings(info),
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{imgID, "CONTAINS", binID})
		mods := []*debugModule{{Path: "stdlib", Version: strings.TrimPrefix(info.GoVersion, "go")}, {Path: info.Main.Path, Version: mainVersion(info.Main.Version, m.Version)}}
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			mods = append(mods, &debugModule{Path: d.Path, Version: d.Version, Sum: d.Sum})
		}
		for _, mod := range mods {
			id := spdxID("Package", "go-"+mod.Path+"-"+mod.Version)
			if !seen[id] {
				seen[id] = true
				pkg := spdxPackage{Name: mod.Path, SPDXID: id, VersionInfo: mod.Version, DownloadLocation: "NOASSERTION", PrimaryPurpose: "LIBRARY",
					ExternalRefs: []spdxRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: purl(mod.Path, mod.Version)}}}
				if mod.Sum != "" {
					pkg.Comment = "go.sum " + mod.Sum
				}
				doc.Packages = append(doc.Packages, pkg)
			}
			doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "DEPENDS_ON", id})
		}
	}
	sort.SliceStable(doc.Packages[1:], func(i, j int) bool { return doc.Packages[1+i].SPDXID < doc.Packages[1+j].SPDXID })
	return json.MarshalIndent(doc, "", " ")
}

type debugModule struct{ Path, Version, Sum string }

// mainVersion is the main module's recorded version, or the image's when Go
// recorded none ("(devel)", a build without VCS stamping).
func mainVersion(recorded, image string) string {
	if recorded == "" || recorded == "(devel)" {
		return image
	}
	return recorded
}

// purl is a Go module's package URL (purl-spec's golang type).
func purl(path, version string) string {
	if path == "stdlib" {
		return "pkg:golang/stdlib@" + version
	}
	return "pkg:golang/" + path + "@" + version
}

// settings summarises the build settings that say how the binary was made.
func settings(info *buildinfo.BuildInfo) string {
	var out []string
	for _, s := range info.Settings {
		switch s.Key {
		case "-trimpath", "CGO_ENABLED", "GOOS", "GOARCH", "GOAMD64", "GOARM64", "vcs.revision":
			out = append(out, s.Key+"="+s.Value)
		}
	}
	return strings.Join(out, " ")
}

// Artifact is an OCI 1.1 artifact manifest with its blobs: here the SBOM,
// whose subject is its platform's image manifest, so that the referrers API
// (or, on a registry without it, the referrers tag sha256-<digest>) finds it.
type Artifact struct {
	Manifest []byte
	Digest   v1.Hash
	Blobs    map[v1.Hash][]byte
}

// RawManifest and MediaType make an Artifact a remote.Taggable.
func (a Artifact) RawManifest() ([]byte, error) { return a.Manifest, nil }

// MediaType is the artifact manifest's media type, an OCI image manifest.
func (a Artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// NewSBOMArtifact wraps an SPDX document as an artifact referring to subject.
func NewSBOMArtifact(doc []byte, subject *v1.Descriptor, m Meta) (Artifact, error) {
	docHash, docSize, err := v1.SHA256(bytes.NewReader(doc))
	if err != nil {
		return Artifact{}, err
	}
	emptyHash, _, err := v1.SHA256(bytes.NewReader(emptyJSON))
	if err != nil {
		return Artifact{}, err
	}
	sub := *subject
	sub.Platform = nil
	man := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: emptyMediaType, Digest: emptyHash, Size: int64(len(emptyJSON)), Data: emptyJSON},
		Layers: []v1.Descriptor{{MediaType: SPDXMediaType, Digest: docHash, Size: docSize,
			Annotations: map[string]string{"org.opencontainers.image.title": "sbom.spdx.json"}}},
		Subject:      &sub,
		ArtifactType: SPDXMediaType,
		Annotations: map[string]string{
			"org.opencontainers.image.created":     m.Created.UTC().Format("2006-01-02T15:04:05Z"),
			"org.opencontainers.image.description": "SPDX SBOM of " + subject.Platform.OS + "/" + subject.Platform.Architecture + ", from the binaries' Go build information",
		},
	}
	raw, err := json.Marshal(man)
	if err != nil {
		return Artifact{}, err
	}
	d, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return Artifact{}, err
	}
	return Artifact{Manifest: raw, Digest: d, Blobs: map[v1.Hash][]byte{docHash: doc, emptyHash: emptyJSON}}, nil
}

// WriteTo adds the artifact to an OCI layout: its blobs, its manifest, and
// a descriptor in index.json (with artifactType, as the referrers API lists it).
func (a Artifact) WriteTo(p layout.Path) error {
	for h, b := range a.Blobs {
		if err := p.WriteBlob(h, ioNopCloser(b)); err != nil {
			return err
		}
	}
	if err := p.WriteBlob(a.Digest, ioNopCloser(a.Manifest)); err != nil {
		return err
	}
	return p.AppendDescriptor(v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: a.Digest,
		Size: int64(len(a.Manifest)), ArtifactType: SPDXMediaType})
}
