// Command k8s-validate renders every deploy/k8s overlay with the kustomize
// Go API, decodes each object strictly into its k8s.io/api type and runs the
// semantic checks of package validate. With -helm it also lints the chart
// (deploy/helm/headcount) and renders it with its defaults and each of its
// examples, and checks each render the same way, with what the examples
// expect to exist first (validate.ChartGiven). -files checks rendered YAML
// files instead (e.g. your own `helm template` output). It needs no cluster
// and, once the module cache is warm, no network. Exit 0: every target
// passed; 1: a target failed; 2: bad usage.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/headcount/headcount/deploy/k8s/validate"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// target is one render to check.
type target struct {
	name string
	// lint runs first when set (helm lint).
	lint   func() error
	render func() (*validate.Set, error)
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("k8s-validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "..", "the deploy/k8s directory")
	render := fs.String("render", "", "print this target's rendered YAML (e.g. overlays/single-redis) instead of checking")
	helm := fs.String("helm", "", "a helm binary: also lint and check the chart with its defaults and each example")
	chart := fs.String("chart", "", "the chart's directory (default: deploy/helm/headcount beside -root)")
	files := fs.String("files", "", "comma-separated rendered YAML files to check, each a target, instead of the overlays and the chart")
	given := fs.Bool("given", false, "with -files: add what the chart's examples expect to exist first (validate.ChartGiven)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	start := time.Now()
	if *chart == "" {
		*chart = filepath.Join(*root, "..", "helm", "headcount")
	}
	targets, err := collect(*root, *helm, *chart, *files, *given)
	if err != nil {
		fmt.Fprintln(stderr, "k8s-validate:", err)
		return 2
	}
	if *render != "" {
		tree, err := validate.LoadTree(*root)
		if err != nil {
			fmt.Fprintln(stderr, "k8s-validate:", err)
			return 2
		}
		tts, err := tree.Targets()
		if err != nil {
			fmt.Fprintln(stderr, "k8s-validate:", err)
			return 2
		}
		for _, tg := range tts {
			if tg.Name != *render {
				continue
			}
			docs, err := tree.Render(tg)
			if err != nil {
				fmt.Fprintln(stderr, "k8s-validate:", err)
				return 1
			}
			for _, d := range docs {
				fmt.Fprintf(stdout, "---\n%s", d)
			}
			return 0
		}
		fmt.Fprintf(stderr, "k8s-validate: no target %q\n", *render)
		return 2
	}
	passed, failed := 0, 0
	for _, tg := range targets {
		if tg.lint != nil {
			if err := tg.lint(); err != nil {
				fmt.Fprintf(stdout, "FAIL %s: helm lint\n  %s\n", tg.name, strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "\n  "))
				failed++
				continue
			}
		}
		set, err := tg.render()
		if err != nil {
			fmt.Fprintf(stdout, "FAIL %s\n  %s\n", tg.name, strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "\n  "))
			failed++
			continue
		}
		errs := set.Check()
		if len(errs) > 0 {
			fmt.Fprintf(stdout, "FAIL %s (%d objects)\n", tg.name, len(set.Objects))
			for _, e := range errs {
				fmt.Fprintf(stdout, "  %v\n", e)
			}
			failed++
			continue
		}
		linted := ""
		if tg.lint != nil {
			linted = "helm lint --strict passed, "
		}
		fmt.Fprintf(stdout, "ok   %s: %s%d objects decoded strictly, %d checks passed\n", tg.name, linted, len(set.Objects), len(validate.Checks))
		passed++
	}
	fmt.Fprintf(stdout, "k8s-validate: %d passed, %d failed (%s)\n", passed, failed, time.Since(start).Round(time.Millisecond))
	if failed > 0 {
		return 1
	}
	return 0
}

// collect lists the targets: the files given, or every overlay (and the
// chart's renders with -helm).
func collect(root, helm, chartDir, files string, withGiven bool) ([]target, error) {
	var given [][]byte
	if withGiven || (files == "" && helm != "") {
		var err error
		if given, err = validate.LoadChartGiven(root); err != nil {
			return nil, err
		}
	}
	var out []target
	if files != "" {
		for _, f := range strings.Split(files, ",") {
			out = append(out, target{name: f, render: func() (*validate.Set, error) {
				docs, err := validate.ReadDocs(f)
				if err != nil {
					return nil, err
				}
				return validate.DecodeSet(f, append(append([][]byte{}, given...), docs...))
			}})
		}
		return out, nil
	}
	tree, err := validate.LoadTree(root)
	if err != nil {
		return nil, err
	}
	tts, err := tree.Targets()
	if err != nil {
		return nil, err
	}
	for _, tg := range tts {
		out = append(out, target{name: tg.Name, render: func() (*validate.Set, error) { return tree.RenderSet(tg) }})
	}
	if helm == "" {
		return out, nil
	}
	c := &validate.Chart{Helm: helm, Dir: chartDir, Release: "headcount", Namespace: "headcount"}
	cts, err := c.Targets()
	if err != nil {
		return nil, err
	}
	for _, tg := range cts {
		out = append(out, target{
			name:   tg.Name,
			lint:   func() error { return c.Lint(tg) },
			render: func() (*validate.Set, error) { return c.RenderSet(tg, given) },
		})
	}
	return out, nil
}
