package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "../..", "the repository's root")
	image := fs.String("image", "headcount:dev", "the image's name; its tag is the version label (org.opencontainers.image.version)")
	out := fs.String("out", "", "write the image here as an OCI image layout tarball")
	push := fs.Bool("push", false, "push the image to -image's registry (credentials: docker's config and helpers, then $GITHUB_TOKEN for ghcr.io)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch to build, each cross-compiled")
	ca := fs.String("ca", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle to ship (Debian's ca-certificates)")
	goCmd := fs.String("go", "go", "the go command that builds the binaries")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	releaseTag := fs.String("release-tag", "", "only check that this git tag is v + the chart's appVersion, print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *releaseTag != "" {
		v, err := checkReleaseTag(*root, *releaseTag)
		if err != nil {
			fmt.Fprintln(stderr, "image:", err)
			return 2
		}
		fmt.Fprintln(stdout, v)
		return 0
	}

	// Every setting is checked before anything is built.
	var bad []string
	if fs.NArg() > 0 {
		bad = append(bad, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	// The tag is the version label, so it must be given, not defaulted
	// to latest.
	ref, err := name.NewTag(*image)
	if err != nil || !strings.HasSuffix(*image, ":"+ref.TagStr()) {
		bad = append(bad, fmt.Sprintf("-image %q is not a name with a tag (e.g. ghcr.io/headcount/headcount:0.1.0)", *image))
	}
	if *out == "" && !*push {
		bad = append(bad, "give -out, -push or both")
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		bad = append(bad, err.Error())
	}
	epoch, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		bad = append(bad, err.Error())
	}
	if _, err := os.Stat(*ca); err != nil {
		bad = append(bad, fmt.Sprintf("-ca: %v (Debian: apt-get install ca-certificates; make image runs scripts/ensure-deps.sh image)", err))
	}
	if *timeout <= 0 {
		bad = append(bad, "-timeout must be positive")
	}
	if len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(stderr, "image:", b)
		}
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	idx, err := build(ctx, options{root: *root, goCmd: *goCmd, ref: ref, platforms: plats, caFile: *ca, epoch: epoch})
	if err != nil {
		fmt.Fprintln(stderr, "image:", err)
		return 1
	}
	digest, err := idx.Digest()
	if err != nil {
		fmt.Fprintln(stderr, "image:", err)
		return 1
	}
	if *out != "" {
		if err := writeLayoutTar(*out, idx, ref); err != nil {
			fmt.Fprintln(stderr, "image:", err)
			return 1
		}
		fmt.Fprintf(stdout, "image: wrote %s (%s, %s)\n", *out, ref, digest)
	}
	if *push {
		if err := pushIndex(ctx, idx, ref); err != nil {
			fmt.Fprintln(stderr, "image:", err)
			return 1
		}
		fmt.Fprintf(stdout, "image: pushed %s@%s\n", ref, digest)
	}
	fmt.Fprintf(stdout, "image: %s in %s\n", *platforms, time.Since(start).Round(time.Second))
	return 0
}

func parsePlatforms(s string) ([]v1.Platform, error) {
	var ps []v1.Platform
	for _, p := range strings.Split(s, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || osName != "linux" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("-platforms: %q is not linux/<arch> (e.g. linux/amd64)", p)
		}
		ps = append(ps, v1.Platform{OS: osName, Architecture: arch})
	}
	return ps, nil
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH (reproducible-builds.org): every
// time in the image is this one, so that a rebuild gives the same digest.
func sourceDateEpoch(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a count of seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}
