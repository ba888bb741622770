// Package version says which build a binary is: the main module's version
// and the VCS revision it was built from, read from the build information
// Go embeds (runtime/debug.ReadBuildInfo). Where the build could not stamp
// a revision (a git worktree, GOFLAGS=-buildvcs=false), the build passes
// one with -ldflags -X (scripts/version-ldflags.sh: make build, make image).
//
// Its functions are safe for concurrent use: they only read.
package version
