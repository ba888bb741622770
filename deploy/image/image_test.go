package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestImage builds the image twice as make image does, for this machine's
// architecture only (a second one would double the compile on CI), once
// to a tarball and once to a tarball and a registry on loopback; both
// must be the same bytes and the pushed index the same digest. Then it
// opens the tarball and checks what the Deployments rely on, and runs
// each binary from it with --version.
func TestImage(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	const epoch = 1764000000
	t.Setenv("SOURCE_DATE_EPOCH", fmt.Sprint(epoch))
	regAddr := startRegistry(t)
	dir := t.TempDir()
	platform := "linux/" + runtime.GOARCH
	first, second := filepath.Join(dir, "first.tar"), filepath.Join(dir, "second.tar")
	pushed := regAddr + "/headcount/headcount:0.0.1-test"
	for _, args := range [][]string{
		{"-image", pushed, "-out", first},
		{"-image", pushed, "-out", second, "-push"},
	} {
		var stdout, stderr bytes.Buffer
		args = append(args, "-root", root, "-platforms", platform)
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("image %q: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
		}
		t.Logf("image %q:\n%s", args, stdout.String())
	}
	if a, b := fileSum(t, first), fileSum(t, second); a != b {
		t.Errorf("two builds of one commit differ: %x and %x", a, b)
	}

	outer := openLayoutTar(t, first, dir)
	im, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d entries, want 1", len(im.Manifests))
	}
	anns := im.Manifests[0].Annotations
	if anns["io.containerd.image.name"] != pushed || anns["org.opencontainers.image.ref.name"] != "0.0.1-test" {
		t.Errorf("index.json names the image %v", anns)
	}
	idx, err := outer.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(pushed)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != im.Manifests[0].Digest {
		t.Errorf("pushed %s, the tarball holds %s", desc.Digest, im.Manifests[0].Digest)
	}

	manifests, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifests.Manifests) != 1 || manifests.Manifests[0].Platform == nil ||
		manifests.Manifests[0].Platform.String() != platform {
		t.Fatalf("the index's manifests: %+v, want one for %s", manifests.Manifests, platform)
	}
	img, err := idx.Image(manifests.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	checkConfig(t, img, time.Unix(epoch, 0).UTC(), gitOut(t, root, "rev-parse", "HEAD"))
	checkFiles(t, img, root, dir)
}

func checkConfig(t *testing.T, img v1.Image, epoch time.Time, rev string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", c.User)
	}
	if strings.Join(c.Entrypoint, " ") != "/usr/local/bin/wsnode" || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %q; want /usr/local/bin/wsnode alone", c.Entrypoint, c.Cmd)
	}
	if c.WorkingDir != "/" {
		t.Errorf("working dir %q, want /", c.WorkingDir)
	}
	want := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/headcount/headcount",
		"org.opencontainers.image.version":  "0.0.1-test",
		"org.opencontainers.image.revision": rev,
	}
	for k, v := range want {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	if !cf.Created.Equal(epoch) {
		t.Errorf("created %v, want SOURCE_DATE_EPOCH %v", cf.Created.Time, epoch)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(epoch) {
			t.Errorf("history %q created %v, want %v", h.CreatedBy, h.Created.Time, epoch)
		}
	}
}

// checkFiles reads the image's filesystem as a runtime unpacks it: exactly
// the CA bundle and the three binaries with their directories.
func checkFiles(t *testing.T, img v1.Image, root, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	files := map[string][]byte{}
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, want root's (the user only reads and runs)", h.Name, h.Uid, h.Gid)
		}
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
			if strings.HasPrefix(h.Name, "usr/local/bin/") && h.Mode != 0o755 {
				t.Errorf("%s has mode %o, want 755", h.Name, h.Mode)
			}
		}
	}
	for _, sh := range []string{"bin/sh", "usr/bin/sh", "bin/busybox"} {
		if _, ok := files[sh]; ok {
			t.Errorf("the image has %s", sh)
		}
	}
	if len(files) != 4 {
		t.Errorf("the image holds %q, want the CA bundle and three binaries only", names)
	}
	hostCA, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatal(err)
	}
	if ca, ok := files["etc/ssl/certs/ca-certificates.crt"]; !ok || !bytes.Equal(ca, hostCA) {
		t.Errorf("etc/ssl/certs/ca-certificates.crt is missing or not the build machine's bundle (%d bytes)", len(ca))
	}

	commitTime := gitOut(t, root, "log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ")
	rev := gitOut(t, root, "rev-parse", "HEAD")
	for _, b := range []string{"wsnode", "cleaner", "httpapi"} {
		data, ok := files["usr/local/bin/"+b]
		if !ok {
			t.Errorf("usr/local/bin/%s is missing", b)
			continue
		}
		bin := filepath.Join(dir, b)
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		checkStatic(t, bin)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, bin, "--version").Output()
		cancel()
		if err != nil {
			t.Errorf("%s --version: %v", b, err)
			continue
		}
		// As make build stamps it: pkg/version's line, with this commit.
		re := regexp.MustCompile(`^` + b + ` \S+ \(revision ([0-9a-f]{40}), (\S+?)(, modified)?; go1\.\S+\)\n$`)
		m := re.FindStringSubmatch(string(out))
		if m == nil || m[1] != rev || m[2] != commitTime {
			t.Errorf("%s --version printed %q, want revision %s at %s", b, out, rev, commitTime)
		}
	}
}

// checkStatic fails unless bin needs no dynamic loader or shared library.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked (%v)", bin, p.Type)
		}
	}
}

// TestFullName checks the names containerd and docker load give an image
// from the tarball: Docker Hub's as docker.io/library/..., as kubelet and
// kind look it up.
func TestFullName(t *testing.T) {
	for in, want := range map[string]string{
		"headcount:dev":                     "docker.io/library/headcount:dev",
		"ghcr.io/headcount/headcount:0.1.0": "ghcr.io/headcount/headcount:0.1.0",
		"127.0.0.1:5000/headcount:dev":      "127.0.0.1:5000/headcount:dev",
	} {
		ref, err := name.NewTag(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := fullName(ref); got != want {
			t.Errorf("fullName(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestReleaseTag checks the release workflow's guard: a tag deploys the
// chart's appVersion or nothing.
func TestReleaseTag(t *testing.T) {
	for _, tc := range []struct {
		chart, tag, want string
	}{
		{"appVersion: 0.1.0\n", "v0.1.0", "0.1.0"},
		{"appVersion: \"0.1.0\"\n", "v0.1.0", "0.1.0"},
		{"appVersion: 0.1.0\n", "v0.1.1", ""},
		{"appVersion: 0.1.0\n", "0.1.0", ""},
		{"appVersion: dev\n", "v0.1.0", ""},
		{"version: 0.1.0\n", "v0.1.0", ""},
	} {
		root := t.TempDir()
		p := filepath.Join(root, chart)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("apiVersion: v2\nname: headcount\n"+tc.chart), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run([]string{"-root", root, "-release-tag", tc.tag}, &stdout, &stderr)
		if tc.want == "" && code != 2 {
			t.Errorf("chart %q, tag %s: exit %d (%q), want 2", tc.chart, tc.tag, code, stdout.String())
		}
		if tc.want != "" && (code != 0 || stdout.String() != tc.want+"\n") {
			t.Errorf("chart %q, tag %s: exit %d, printed %q (%s), want %q", tc.chart, tc.tag, code, stdout.String(), stderr.String(), tc.want)
		}
	}
}

// TestReleaseWorkflow parses .github/workflows/release.yml, which runs
// only on GitHub: on a v* tag it checks the tag, runs CI, then pushes
// with make image-push the version the check printed.
func TestReleaseWorkflow(t *testing.T) {
	data, err := os.ReadFile("../../.github/workflows/release.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		On struct {
			Push struct {
				Tags []string `yaml:"tags"`
			} `yaml:"push"`
		} `yaml:"on"`
		Jobs map[string]struct {
			Steps []struct {
				Run string `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatalf("release.yml: %v", err)
	}
	if strings.Join(wf.On.Push.Tags, ",") != "v*" {
		t.Errorf("release.yml runs on tags %q, want v*", wf.On.Push.Tags)
	}
	var runs []string
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			if s.Run != "" {
				runs = append(runs, s.Run)
			}
		}
	}
	all := strings.Join(runs, "\n")
	order := []string{"make -s image-release-check TAG=\"$GITHUB_REF_NAME\"", "bash .ci/run", "make image-push IMAGE=\"ghcr.io/headcount/headcount:$VERSION\""}
	at := -1
	for _, want := range order {
		i := strings.Index(all, want)
		if i < 0 || i < at {
			t.Errorf("release.yml does not run %q after %q", want, order)
		}
		at = i
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"image-release-check", "image-push"} {
		if !regexp.MustCompile(`(?m)^` + target + `:`).Match(mk) {
			t.Errorf("release.yml runs make %s, which the Makefile does not have", target)
		}
	}
}

// startRegistry serves go-containerregistry's registry (the distribution
// API, blobs in memory) on a free loopback port, which is plain HTTP to
// go-containerregistry's client.
func startRegistry(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

func openLayoutTar(t *testing.T, tarPath, dir string) v1.ImageIndex {
	t.Helper()
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	dst := filepath.Join(dir, "layout")
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dst+string(filepath.Separator)) {
			t.Fatalf("%s escapes the layout", h.Name)
		}
		if h.Typeflag == tar.TypeDir {
			err = os.MkdirAll(p, 0o755)
		} else {
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, data, 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dst)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

func gitOut(t *testing.T, root string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TZ=UTC")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %q: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}
