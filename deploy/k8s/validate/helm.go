package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Chart renders the Helm chart (deploy/helm/headcount) with a helm binary:
// what an operator's `helm template` or `helm install` would send.
type Chart struct {
	// Helm is the helm binary (make k8s-validate builds the pinned one).
	Helm string
	// Dir is the chart's directory.
	Dir string
	// Release and Namespace are the release's name and namespace. The
	// chart names its objects after the release; the namespace is the
	// kustomize base's, so the two renders compare.
	Release, Namespace string
}

// ChartExamplesDir holds the chart's documented values files, each a
// target beside the defaults.
const ChartExamplesDir = "examples"

// ChartTarget is one render of the chart: the defaults, or a values file.
type ChartTarget struct {
	// Name is how reports name it.
	Name string
	// Values is a values file relative to the chart, or "" for the defaults.
	Values string
}

// Targets lists the defaults and each examples/*.yaml.
func (c *Chart) Targets() ([]ChartTarget, error) {
	if _, err := os.Stat(filepath.Join(c.Dir, "Chart.yaml")); err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	out := []ChartTarget{{Name: "helm " + filepath.Base(c.Dir)}}
	files, err := filepath.Glob(filepath.Join(c.Dir, ChartExamplesDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, f := range files {
		rel := filepath.ToSlash(filepath.Join(ChartExamplesDir, filepath.Base(f)))
		out = append(out, ChartTarget{Name: "helm " + filepath.Base(c.Dir) + " -f " + rel, Values: rel})
	}
	return out, nil
}

func (c *Chart) args(tg ChartTarget, extra []string) []string {
	var a []string
	if tg.Values != "" {
		a = append(a, "--values", filepath.Join(c.Dir, tg.Values))
	}
	return append(a, extra...)
}

// run runs helm and returns its standard output; a failure carries its
// standard error.
func (c *Chart) run(args ...string) ([]byte, error) {
	if c.Helm == "" {
		return nil, errors.New("no helm binary (make k8s-validate builds the pinned one into .tools)")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(c.Helm, args...) //nolint:gosec // G204: the helm binary the operator (or make) names
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// No user's helm configuration, repositories or plugins take part.
	tmp, err := os.MkdirTemp("", "k8s-validate-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(tmp, "config"),
		"HELM_CACHE_HOME="+filepath.Join(tmp, "cache"),
		"HELM_DATA_HOME="+filepath.Join(tmp, "data"),
		"KUBECONFIG="+filepath.Join(tmp, "no-kubeconfig"))
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), helmStderr(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// helmStderr drops helm's notes on the chart's symbolic link
// (files/headcount.json), which it follows on purpose.
func helmStderr(b []byte) string {
	var out strings.Builder
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.Contains(l, "found symbolic link in path") {
			out.WriteString(l)
		}
	}
	return out.String()
}

// Lint runs `helm lint --strict` (warnings fail) with the target's values.
func (c *Chart) Lint(tg ChartTarget) error {
	_, err := c.run(append([]string{"lint", "--strict", c.Dir, "--namespace", c.Namespace}, c.args(tg, nil)...)...)
	return err
}

// Render runs `helm template` with the target's values (and extra flags,
// e.g. --set) and returns each object as YAML.
func (c *Chart) Render(tg ChartTarget, extra ...string) ([][]byte, error) {
	out, err := c.run(append([]string{"template", c.Release, c.Dir, "--namespace", c.Namespace}, c.args(tg, extra)...)...)
	if err != nil {
		return nil, err
	}
	return SplitYAML(out)
}

// SplitYAML splits a stream of YAML documents, leaving out the empty ones
// (helm's comment-only documents among them).
func SplitYAML(b []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, fmt.Errorf("document %d: %w", len(out), err)
		}
		if v != nil {
			out = append(out, doc)
		}
	}
}

// ReadDocs reads a file of YAML documents.
func ReadDocs(path string) ([][]byte, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: a file the operator names (-files) or ChartGiven
	if err != nil {
		return nil, err
	}
	docs, err := SplitYAML(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return docs, nil
}

// ChartGiven are the files (relative to deploy/k8s) of what must exist
// before the chart is installed with its examples: the namespace, labelled
// as the base labels it, and stand-ins of the Secrets the examples name.
var ChartGiven = []string{"base/namespace.yaml", "validate/testdata/chart-given.yaml"}

// LoadChartGiven reads ChartGiven under root (deploy/k8s).
func LoadChartGiven(root string) ([][]byte, error) {
	var out [][]byte
	for _, f := range ChartGiven {
		docs, err := ReadDocs(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		out = append(out, docs...)
	}
	return out, nil
}

// RenderSet renders the target and decodes it strictly, with given (what
// exists before the install) added.
func (c *Chart) RenderSet(tg ChartTarget, given [][]byte, extra ...string) (*Set, error) {
	docs, err := c.Render(tg, extra...)
	if err != nil {
		return nil, err
	}
	return DecodeSet(tg.Name, append(append([][]byte{}, given...), docs...))
}
