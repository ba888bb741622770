// Package version says which build a binary is: the main module's version
// and the VCS revision it was built from, read from the build information
// Go embeds (runtime/debug.ReadBuildInfo). Where the build could not stamp
// a revision (no .git in the Docker build context, a git worktree), the
// build passes one with -ldflags -X (see the Makefile and the Dockerfile).
//
// Its functions are safe for concurrent use: they only read.
package version
