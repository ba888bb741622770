# One image, three static binaries: /usr/local/bin/{wsnode,cleaner,httpapi}.
# Kubernetes picks the binary with `command` (deploy/k8s); `docker run IMAGE`
# alone starts wsnode. Build: make image (IMAGE=headcount:dev). The cache
# mounts need BuildKit, Docker's default builder since 23.0.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd ./cmd
COPY pkg ./pkg
# Static (no libc to match in the final image), no local paths in the
# binaries. .git is not in the build context, so Go cannot stamp the VCS
# revision: make image passes it (scripts/version-ldflags.sh) for --version;
# without it, --version says the revision is unknown.
ARG VCS_revision=
ARG VCS_time=
ARG VCS_modified=
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false \
      -ldflags="-s -w -X github.com/headcount/headcount/pkg/version.revision=${VCS_revision} -X github.com/headcount/headcount/pkg/version.time=${VCS_time} -X github.com/headcount/headcount/pkg/version.modified=${VCS_modified}" \
      -o /out/ ./cmd/wsnode ./cmd/cleaner ./cmd/httpapi

# distroless static: CA certificates (webhooks over HTTPS), tzdata, passwd
# entries, and no shell or package manager. nonroot is uid/gid 65532, the
# runAsUser of the manifests. Pin a digest in production.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/wsnode /out/cleaner /out/httpapi /usr/local/bin/
USER 65532:65532
# WebSocket, HTTP API, and the admin ports (/metrics, /healthz, /readyz).
EXPOSE 6001 8080 9601 9602 9603
ENTRYPOINT ["/usr/local/bin/wsnode"]
