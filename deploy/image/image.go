package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/authn/github"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// binDir is where the manifests' `command` finds the binaries
	// (deploy/k8s/base, deploy/helm/headcount).
	binDir = "/usr/local/bin"
	// caPath is the first file Go's crypto/x509 reads on Linux.
	caPath = "/etc/ssl/certs/ca-certificates.crt"
	// user is distroless's nonroot, the manifests' runAsUser and fsGroup.
	user   = "65532:65532"
	source = "https://github.com/headcount/headcount"
	// chart holds appVersion, which a release tag must match.
	chart = "deploy/helm/headcount/Chart.yaml"
)

// binaries are the commands under cmd/; the first is the entrypoint.
var binaries = []string{"wsnode", "cleaner", "httpapi"}

type options struct {
	root      string // the repository's root
	goCmd     string
	ref       name.Tag
	platforms []v1.Platform
	caFile    string
	epoch     time.Time // every time in the image
}

// file is one regular file of a layer.
type file struct {
	path string // absolute, in the image
	data []byte
	mode int64
}

// build compiles the binaries for each platform and returns the index of
// the images.
func build(ctx context.Context, o options) (v1.ImageIndex, error) {
	ldflags, err := exec.CommandContext(ctx, "bash", filepath.Join(o.root, "scripts/version-ldflags.sh")).Output() //nolint:gosec // G204: the script of the tree make builds
	if err != nil {
		return nil, fmt.Errorf("scripts/version-ldflags.sh: %w", err)
	}
	ca, err := os.ReadFile(o.caFile)
	if err != nil {
		return nil, err
	}
	caLayer, err := layer([]file{{caPath, ca, 0o644}}, o.epoch)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.version":  o.ref.TagStr(),
		"org.opencontainers.image.revision": revision(string(ldflags)),
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.platforms {
		bins, err := compile(ctx, o, p, strings.TrimSpace(string(ldflags)))
		if err != nil {
			return nil, err
		}
		img, err := image(caLayer, bins, p, labels, o.epoch)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

// revision is the commit scripts/version-ldflags.sh stamps, "" outside git.
func revision(ldflags string) string {
	for _, f := range strings.Fields(ldflags) {
		if _, rev, ok := strings.Cut(f, "pkg/version.revision="); ok {
			return rev
		}
	}
	return ""
}

// compile builds the binaries as make build does (-buildvcs=auto and the
// same link-time stamp), static and without local paths or symbols.
func compile(ctx context.Context, o options, p v1.Platform, ldflags string) ([]file, error) {
	dir, err := os.MkdirTemp("", "headcount-image-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	args := []string{"build", "-buildvcs=auto", "-trimpath", "-ldflags", "-s -w " + ldflags, "-o", dir + "/"}
	for _, b := range binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.CommandContext(ctx, o.goCmd, args...) //nolint:gosec // G204: the go command make names, on the tree it builds
	cmd.Dir = o.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build for %s/%s: %w\n%s", p.OS, p.Architecture, err, out)
	}
	var files []file
	for _, b := range binaries {
		data, err := os.ReadFile(filepath.Join(dir, b)) //nolint:gosec // G304: a binary just built into our own temporary directory
		if err != nil {
			return nil, err
		}
		files = append(files, file{path.Join(binDir, b), data, 0o755})
	}
	return files, nil
}

// layer is a gzipped tar of files and their parent directories, owned by
// root, every time the epoch: the same files give the same digest.
func layer(files []file, epoch time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		var parents []string
		for d := path.Dir(f.path); d != "/"; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			// Listed, so that no runtime makes them with modes of its own.
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path[1:], Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// image is one platform's image: the CA layer first, as it changes least.
func image(ca v1.Layer, bins []file, p v1.Platform, labels map[string]string, epoch time.Time) (v1.Image, error) {
	binLayer, err := layer(bins, epoch)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: epoch}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base,
		mutate.Addendum{Layer: ca, History: v1.History{Created: created, CreatedBy: "deploy/image: " + caPath}},
		mutate.Addendum{Layer: binLayer, History: v1.History{Created: created, CreatedBy: "deploy/image: " + binDir + "/{" + strings.Join(binaries, ",") + "}"}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Architecture
	cf.Created = created
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{path.Join(binDir, binaries[0])},
		WorkingDir: "/",
		Labels:     labels,
	}
	return mutate.ConfigFile(img, cf)
}

// writeLayoutTar writes idx as an OCI image layout in a tar, named by ref
// as docker load and ctr import read it, with fixed times and modes.
func writeLayoutTar(out string, idx v1.ImageIndex, ref name.Tag) error {
	dir, err := os.MkdirTemp("", "headcount-image-layout-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          fullName(ref),
		"org.opencontainers.image.ref.name": ref.TagStr(),
	})); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil { //nolint:gosec // G301: bin/, as go build makes it
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp) //nolint:gosec // G304: the -out path make names
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp) }()
	tw := tar.NewWriter(f)
	// WalkDir goes in lexical order, so the tar's order is fixed too.
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o755})
		}
		data, err := os.ReadFile(p) //nolint:gosec // G304: a file of the layout just written to our own temporary directory
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// fullName is ref as containerd names images: docker.io, not
// go-containerregistry's index.docker.io, for Docker Hub.
func fullName(ref name.Tag) string {
	reg := ref.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + ref.RepositoryStr() + ":" + ref.TagStr()
}

func pushIndex(ctx context.Context, idx v1.ImageIndex, ref name.Tag) error {
	kc := authn.NewMultiKeychain(authn.DefaultKeychain, github.Keychain)
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// checkReleaseTag returns the version a release tag names, or why it
// does not match the chart's appVersion, which is what the chart deploys.
func checkReleaseTag(root, tag string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, chart)) //nolint:gosec // G304: the chart of the tree make runs in
	if err != nil {
		return "", err
	}
	var c struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("%s: %w", chart, err)
	}
	if c.AppVersion == "" {
		return "", errors.New(chart + " has no appVersion")
	}
	if tag != "v"+c.AppVersion {
		return "", fmt.Errorf("tag %q does not match appVersion %q in %s: a release tag is v<appVersion>; set appVersion first", tag, c.AppVersion, chart)
	}
	return c.AppVersion, nil
}
