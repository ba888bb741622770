// Command image builds the headcount container image without a container
// daemon, with go-containerregistry, from an empty base: one layer with the
// build machine's CA bundle (Debian's ca-certificates) at
// /etc/ssl/certs/ca-certificates.crt, where Go's crypto/x509 looks first,
// so TLS to Redis and webhooks with public CAs works; one layer with
// wsnode, cleaner and httpapi in /usr/local/bin, static (CGO_ENABLED=0)
// and stamped with the commit as make build stamps them
// (scripts/version-ldflags.sh). Nothing else: no shell, no package
// manager, no passwd file. The config runs as 65532:65532 (the manifests'
// runAsUser), wsnode is the entrypoint, and the Deployments pick their
// binary with `command`.
//
// It guarantees: the same commit, toolchain, CA bundle and
// SOURCE_DATE_EPOCH (0 when unset) give the same index digest and the
// same tarball, byte for byte; every platform (-platforms, linux/amd64
// and linux/arm64 by default, cross-compiled) is one manifest of one OCI
// index. -out writes that index as an OCI image layout tarball named by
// -image (docker load from Docker 25, ctr import, kind load
// image-archive); -push sends it to -image's registry with the default
// keychain (docker's config and credential helpers), then $GITHUB_TOKEN
// for ghcr.io. -release-tag only checks a release tag against the chart's
// appVersion. Exit 0: done; 1: a step failed; 2: bad usage.
package main
