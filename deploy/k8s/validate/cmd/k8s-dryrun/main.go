// Command k8s-dryrun starts etcd and kube-apiserver on loopback ports
// (internal/localkube, with certificates it makes), applies every deploy/k8s target with server-side
// apply, DryRun=All and strict field validation, and stops both servers
// before it exits, within -timeout. The API server's own validation,
// defaulting and admission (Pod Security "restricted" on the namespace)
// run on every object; a warning fails the run like an error. Namespaces
// are created for real first: a dry run cannot create the namespace its
// other objects need. With -helm it applies the chart's renders too (its
// defaults and each example, with what they expect to exist first:
// validate.ChartGiven).
//
// `make k8s-validate-server` builds the two binaries and runs this.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/headcount/headcount/deploy/k8s/validate"
	"github.com/headcount/headcount/deploy/k8s/validate/internal/localkube"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("k8s-dryrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "..", "the deploy/k8s directory")
	apiserver := fs.String("kube-apiserver", "", "kube-apiserver binary")
	etcd := fs.String("etcd", "", "etcd binary")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on the whole run, servers' start and stop included")
	keep := fs.Bool("keep-logs", false, "keep the servers' work directory (logs) after the run")
	helm := fs.String("helm", "", "a helm binary: also apply the chart's renders (defaults and each example)")
	chartDir := fs.String("chart", "", "the chart's directory (default: deploy/helm/headcount beside -root)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *apiserver == "" || *etcd == "" {
		fmt.Fprintln(stderr, "k8s-dryrun: -kube-apiserver and -etcd are required")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()

	tree, err := validate.LoadTree(*root)
	if err != nil {
		fmt.Fprintln(stderr, "k8s-dryrun:", err)
		return 2
	}
	tts, err := tree.Targets()
	if err != nil {
		fmt.Fprintln(stderr, "k8s-dryrun:", err)
		return 2
	}
	var targets []target
	for _, tg := range tts {
		targets = append(targets, target{tg.Name, func() ([][]byte, error) { return tree.Render(tg) }})
	}
	if *helm != "" {
		if *chartDir == "" {
			*chartDir = filepath.Join(*root, "..", "helm", "headcount")
		}
		cts, err := chartTargets(*root, *helm, *chartDir)
		if err != nil {
			fmt.Fprintln(stderr, "k8s-dryrun:", err)
			return 2
		}
		targets = append(targets, cts...)
	}

	work, err := os.MkdirTemp("", "k8s-dryrun-")
	if err != nil {
		fmt.Fprintln(stderr, "k8s-dryrun:", err)
		return 1
	}
	if *keep {
		fmt.Fprintln(stdout, "work directory (logs):", work)
	} else {
		defer os.RemoveAll(work)
	}
	kube, err := localkube.Start(ctx, work, stdout, localkube.Binaries{Etcd: *etcd, APIServer: *apiserver})
	if err != nil {
		fmt.Fprintf(stderr, "k8s-dryrun: %v\n", err)
		return 1
	}
	defer kube.Stop()
	cfg := kube.Config
	fmt.Fprintf(stdout, "kube-apiserver ready on %s after %s\n", cfg.Host, time.Since(start).Round(time.Millisecond))

	a, err := newApplier(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "k8s-dryrun:", err)
		return 1
	}
	passed, failed := 0, 0
	for _, tg := range targets {
		docs, err := tg.render()
		if err == nil {
			err = a.apply(ctx, tg.name, docs, stdout)
		}
		if err != nil {
			fmt.Fprintf(stdout, "FAIL %s\n  %s\n", tg.name, strings.ReplaceAll(err.Error(), "\n", "\n  "))
			failed++
			continue
		}
		passed++
	}
	fmt.Fprintf(stdout, "k8s-dryrun: %d passed, %d failed (%s)\n", passed, failed, time.Since(start).Round(time.Millisecond))
	if failed > 0 {
		return 1
	}
	return 0
}

// target is one render to apply.
type target struct {
	name   string
	render func() ([][]byte, error)
}

// chartTargets renders the chart's defaults and examples, each after what
// it expects to exist (the namespace, the Secrets it names).
func chartTargets(root, helm, dir string) ([]target, error) {
	given, err := validate.LoadChartGiven(root)
	if err != nil {
		return nil, err
	}
	c := &validate.Chart{Helm: helm, Dir: dir, Release: "headcount", Namespace: "headcount"}
	cts, err := c.Targets()
	if err != nil {
		return nil, err
	}
	var out []target
	for _, tg := range cts {
		out = append(out, target{tg.Name, func() ([][]byte, error) {
			docs, err := c.Render(tg)
			return append(append([][]byte{}, given...), docs...), err
		}})
	}
	return out, nil
}

// applier sends objects with server-side apply.
type applier struct {
	dyn      dynamic.Interface
	mapper   *restmapper.DeferredDiscoveryRESTMapper
	mu       sync.Mutex
	warnings []string
}

func newApplier(cfg *rest.Config) (*applier, error) {
	a := &applier{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = a
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	a.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memCache{dc})
	if a.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return a, nil
}

// HandleWarningHeader implements rest.WarningHandler.
func (a *applier) HandleWarningHeader(code int, _, text string) {
	if code != 299 || text == "" {
		return
	}
	a.mu.Lock()
	a.warnings = append(a.warnings, text)
	a.mu.Unlock()
}

func (a *applier) takeWarnings() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.warnings
	a.warnings = nil
	return w
}

// skipped are kinds whose CRDs the throwaway server does not have; k8s-
// validate checks them structurally instead.
var skipped = map[string]string{
	"monitoring.coreos.com":     "the Prometheus Operator's CRDs are not installed here; k8s-validate checks it structurally",
	"gateway.networking.k8s.io": "the Gateway API's CRDs are not installed here; k8s-validate checks it structurally",
}

func (a *applier) apply(ctx context.Context, target string, docs [][]byte, out io.Writer) error {
	var objs []*unstructured.Unstructured
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal(d, &m); err != nil {
			return err
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	// Namespaces for real, first.
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			if err := a.patch(ctx, o, false); err != nil {
				return fmt.Errorf("create %s: %w", id(o), err)
			}
		}
	}
	var errs []error
	applied, skip := 0, 0
	for _, o := range objs {
		gv := o.GroupVersionKind()
		if why, ok := skipped[gv.Group]; ok {
			fmt.Fprintf(out, "     %s: %s skipped: %s\n", target, id(o), why)
			skip++
			continue
		}
		if err := a.patch(ctx, o, true); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id(o), err))
			continue
		}
		for _, w := range a.takeWarnings() {
			errs = append(errs, fmt.Errorf("%s: warning: %s", id(o), w))
		}
		applied++
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	fmt.Fprintf(out, "ok   %s: %d objects accepted by kube-apiserver (server-side apply, dry run, strict)", target, applied)
	if skip > 0 {
		fmt.Fprintf(out, ", %d skipped", skip)
	}
	fmt.Fprintln(out)
	return nil
}

func id(o *unstructured.Unstructured) string { return o.GetKind() + "/" + o.GetName() }

func (a *applier) patch(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == "namespace" {
		ri = a.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	body, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "k8s-dryrun", Force: ptr(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts)
	return err
}

func ptr[T any](v T) *T { return &v }
