// Command k8s-validate renders every deploy/k8s overlay with the kustomize
// Go API, decodes each object strictly into its k8s.io/api type and runs the
// semantic checks of package validate. It needs no cluster and, once the
// module cache is warm, no network. Exit 0: every target passed; 1: a
// target failed; 2: bad usage.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/headcount/headcount/deploy/k8s/validate"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("k8s-validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "..", "the deploy/k8s directory")
	render := fs.String("render", "", "print this target's rendered YAML (e.g. overlays/single-redis) instead of checking")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	start := time.Now()
	tree, err := validate.LoadTree(*root)
	if err != nil {
		fmt.Fprintln(stderr, "k8s-validate:", err)
		return 2
	}
	targets, err := tree.Targets()
	if err != nil {
		fmt.Fprintln(stderr, "k8s-validate:", err)
		return 2
	}
	if *render != "" {
		for _, tg := range targets {
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
		set, err := tree.RenderSet(tg)
		if err != nil {
			fmt.Fprintf(stdout, "FAIL %s\n  %v\n", tg.Name, err)
			failed++
			continue
		}
		errs := set.Check()
		if len(errs) > 0 {
			fmt.Fprintf(stdout, "FAIL %s (%d objects)\n", tg.Name, len(set.Objects))
			for _, e := range errs {
				fmt.Fprintf(stdout, "  %v\n", e)
			}
			failed++
			continue
		}
		fmt.Fprintf(stdout, "ok   %s: %d objects decoded strictly, %d checks passed\n", tg.Name, len(set.Objects), len(validate.Checks))
		passed++
	}
	fmt.Fprintf(stdout, "k8s-validate: %d passed, %d failed (%s)\n", passed, failed, time.Since(start).Round(time.Millisecond))
	if failed > 0 {
		return 1
	}
	return 0
}
