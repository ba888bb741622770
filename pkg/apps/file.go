package apps

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"sync"
)

// ErrUnchanged is what a Source's Load returns when it can tell cheaply
// that its content is what its previous Load saw, good or bad: nothing to
// decode, nothing to replace, no error to report again.
var ErrUnchanged = errors.New("apps unchanged")

// UnavailableError is a Source's failure to reach its apps at all (a
// database down), as opposed to apps that do not parse or validate: the
// last apps loaded keep serving either way, but an operator fixes the two
// differently, and a reloader reports them at different levels.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// File is the Source of an apps file (see Parse). It reads the file through
// whatever symlinks lead to it, as Kubernetes mounts a Secret or ConfigMap
// (the file name points through a ..data symlink the kubelet swaps), and
// decodes it only when its bytes changed since the last Load.
type File struct {
	Path string

	mu   sync.Mutex
	last [sha256.Size]byte
	seen bool
}

// NewFile returns the Source of the apps file at path.
func NewFile(path string) *File { return &File{Path: path} }

func (f *File) String() string { return "apps file " + f.Path }

// Load reads and decodes the file, or returns ErrUnchanged when its bytes
// are those of the last Load (which may have failed: a broken file is
// reported once, not at every poll).
func (f *File) Load(context.Context) (*Registry, error) {
	b, err := os.ReadFile(f.Path) //nolint:gosec // G304: the path is the operator's --apps-file setting
	if err != nil {
		return nil, err // read again at the next poll: a file being replaced may be missing a moment
	}
	sum := sha256.Sum256(b)
	f.mu.Lock()
	unchanged := f.seen && sum == f.last
	f.last, f.seen = sum, true
	f.mu.Unlock()
	if unchanged {
		return nil, ErrUnchanged
	}
	return Parse(b)
}

// WatchPaths returns the directories whose changes may change the file:
// its own, where a Kubernetes volume swaps its ..data symlink or an editor
// renames a new file over the old, and, when the name is a symlink, the
// directory of the file it resolves to.
func (f *File) WatchPaths() []string {
	dirs := []string{filepath.Dir(f.Path)}
	if target, err := filepath.EvalSymlinks(f.Path); err == nil && filepath.Dir(target) != dirs[0] {
		dirs = append(dirs, filepath.Dir(target))
	}
	return dirs
}
