package appstest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// KubeVolume is a directory laid out as the kubelet mounts a Secret or
// ConfigMap: the file name points through ..data, a symlink to a
// timestamped directory, and an update writes a new directory and renames
// a new ..data symlink over the old one. The file's own inode never
// changes in place, so a watch on it alone sees nothing.
type KubeVolume struct {
	t    testing.TB
	dir  string
	name string
	n    int
}

// NewKubeVolume makes the volume in a temporary directory with one file,
// name, holding content.
func NewKubeVolume(t testing.TB, name, content string) *KubeVolume {
	v := &KubeVolume{t: t, dir: t.TempDir(), name: name}
	v.Write(content)
	if err := os.Symlink(filepath.Join("..data", name), v.Path()); err != nil {
		t.Fatal(err)
	}
	return v
}

// Path is the file's name, as a pod reads it.
func (v *KubeVolume) Path() string { return filepath.Join(v.dir, v.name) }

// Write delivers new content the kubelet's way.
func (v *KubeVolume) Write(content string) {
	v.t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_11_27_04_%02d_00.%d", v.n%60, v.n)
	tmp := filepath.Join(v.dir, "..data_tmp")
	for _, err := range []error{
		os.Mkdir(filepath.Join(v.dir, ts), 0o750),
		os.WriteFile(filepath.Join(v.dir, ts, v.name), []byte(content), 0o600),
		os.Symlink(ts, tmp),
		os.Rename(tmp, filepath.Join(v.dir, "..data")),
	} {
		if err != nil {
			v.t.Fatal(err)
		}
	}
}
