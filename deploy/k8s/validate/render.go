package validate

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// memRoot is where the deploy/k8s tree sits in the in-memory file system.
const memRoot = "/k8s"

// Target is one thing to render: an overlay, or an overlay plus optional
// components.
type Target struct {
	// Name is how reports name the target.
	Name string
	// Overlay is the overlay's directory relative to deploy/k8s.
	Overlay string
	// Components are component directories relative to deploy/k8s.
	Components []string
}

// Tree is a copy of deploy/k8s in memory. Targets that add components are
// written as extra kustomizations beside it, so the tree on disk is never
// touched.
type Tree struct {
	fs filesys.FileSystem
}

// LoadTree copies root (deploy/k8s) into memory, leaving out the Go
// modules beside the manifests.
func LoadTree(root string) (*Tree, error) {
	mfs := filesys.MakeFsInMemory()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Go modules (validate, sizing) and hidden directories hold no
			// manifests.
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || fileExists(filepath.Join(p, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mfs.WriteFile(path.Join(memRoot, filepath.ToSlash(rel)), b)
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", root, err)
	}
	return &Tree{fs: mfs}, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Targets lists every overlay, and the production overlay (redis-cluster)
// with each optional component added, so components are validated too.
func (t *Tree) Targets() ([]Target, error) {
	overlays, err := t.kustomizationDirs("overlays")
	if err != nil {
		return nil, err
	}
	components, err := t.kustomizationDirs("components")
	if err != nil {
		return nil, err
	}
	var out []Target
	for _, o := range overlays {
		out = append(out, Target{Name: o, Overlay: o})
	}
	for _, c := range components {
		out = append(out, Target{Name: "overlays/redis-cluster+" + c, Overlay: "overlays/redis-cluster", Components: []string{c}})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no overlays under %s/overlays", memRoot)
	}
	return out, nil
}

func (t *Tree) kustomizationDirs(parent string) ([]string, error) {
	entries, err := t.fs.ReadDir(path.Join(memRoot, parent))
	if err != nil {
		return nil, nil // no such directory
	}
	var out []string
	for _, e := range entries {
		dir := path.Join(parent, e)
		if t.fs.Exists(path.Join(memRoot, dir, "kustomization.yaml")) {
			out = append(out, dir)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Render runs kustomize on the target and returns each object as YAML.
func (t *Tree) Render(tg Target) ([][]byte, error) {
	dir := path.Join(memRoot, tg.Overlay)
	if len(tg.Components) > 0 {
		// What an operator does: the overlay, with the components added to
		// its kustomization. The copy sits as deep as the overlay, so its
		// relative paths resolve alike.
		var err error
		if dir, err = t.withComponents(tg); err != nil {
			return nil, err
		}
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(t.fs, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", tg.Name, err)
	}
	var out [][]byte
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("kustomize %s: %s: %w", tg.Name, r.CurId(), err)
		}
		out = append(out, y)
	}
	return out, nil
}

func (t *Tree) withComponents(tg Target) (string, error) {
	src := path.Join(memRoot, tg.Overlay)
	dst := path.Join(memRoot, ".targets", strings.NewReplacer("/", "-", "+", "-").Replace(tg.Name))
	files, err := t.fs.ReadDir(src)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		b, err := t.fs.ReadFile(path.Join(src, f))
		if err != nil {
			return "", err
		}
		if f == "kustomization.yaml" {
			var k map[string]any
			if err := yaml.Unmarshal(b, &k); err != nil {
				return "", fmt.Errorf("%s: %w", path.Join(tg.Overlay, f), err)
			}
			comps, _ := k["components"].([]any)
			for _, c := range tg.Components {
				comps = append(comps, "../../"+c)
			}
			k["components"] = comps
			if b, err = yaml.Marshal(k); err != nil {
				return "", err
			}
		}
		if err := t.fs.WriteFile(path.Join(dst, f), b); err != nil {
			return "", err
		}
	}
	return dst, nil
}

// RenderSet renders the target and decodes it strictly.
func (t *Tree) RenderSet(tg Target) (*Set, error) {
	docs, err := t.Render(tg)
	if err != nil {
		return nil, err
	}
	return DecodeSet(tg.Name, docs)
}
