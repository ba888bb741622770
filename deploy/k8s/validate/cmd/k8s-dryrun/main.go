// Command k8s-dryrun starts etcd and kube-apiserver on loopback ports (with
// certificates it makes), applies every deploy/k8s target with server-side
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
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	srv := &servers{work: work, log: stdout}
	defer srv.stop()
	cfg, err := srv.start(ctx, *etcd, *apiserver)
	if err != nil {
		fmt.Fprintf(stderr, "k8s-dryrun: %v\n%s", err, srv.tails())
		return 1
	}
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

// servers runs etcd and kube-apiserver as children that die with us.
type servers struct {
	work  string
	log   io.Writer
	procs []*exec.Cmd
	logs  []string
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *servers) spawn(name, bin string, args ...string) error {
	logPath := filepath.Join(s.work, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with us even if we are killed; its own process group so a
	// terminal's Ctrl-C reaches it only through us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	s.procs = append(s.procs, cmd)
	s.logs = append(s.logs, logPath)
	go func() { _ = cmd.Wait(); f.Close() }()
	return nil
}

// stop ends the servers, newest first: SIGTERM, then SIGKILL after 10s.
func (s *servers) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i].Process
		_ = p.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() {
			for p.Signal(syscall.Signal(0)) == nil {
				time.Sleep(50 * time.Millisecond)
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Kill()
		}
	}
	s.procs = nil
}

// tails returns the end of each server's log, for a failed start.
func (s *servers) tails() string {
	var b strings.Builder
	for _, l := range s.logs {
		data, _ := os.ReadFile(l)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", filepath.Base(l), data)
	}
	return b.String()
}

func (s *servers) start(ctx context.Context, etcdBin, apiserverBin string) (*rest.Config, error) {
	p, err := makePKI(s.work)
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	// A throwaway store: fsync buys nothing here and costs seconds.
	if err := s.spawn("etcd", etcdBin,
		"--name=dryrun", "--data-dir="+filepath.Join(s.work, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=dryrun="+peer, "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, http.DefaultClient, client+"/health", `"health":"true"`); err != nil {
		return nil, fmt.Errorf("etcd did not become healthy: %w", err)
	}
	fmt.Fprintf(s.log, "etcd healthy on %s\n", client)

	host := fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	if err := s.spawn("kube-apiserver", apiserverBin,
		"--etcd-servers="+client,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--tls-cert-file="+p.serverCert, "--tls-private-key-file="+p.serverKey,
		"--client-ca-file="+p.caCert,
		"--service-account-issuer="+host, "--service-account-key-file="+p.saPub, "--service-account-signing-key-file="+p.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		// No kubelets, no endpoints of its own to publish on loopback.
		"--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(s.work, "apiserver-certs"),
		"--profiling=false"); err != nil {
		return nil, err
	}
	cfg := &rest.Config{
		Host:            host,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM, CertData: p.clientCertPEM, KeyData: p.clientKeyPEM},
		QPS:             100, Burst: 200,
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	cert, err := tls.X509KeyPair(p.clientCertPEM, p.clientKeyPEM)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	if err := waitHTTP(ctx, hc, host+"/readyz", "ok"); err != nil {
		return nil, fmt.Errorf("kube-apiserver did not become ready: %w", err)
	}
	return cfg, nil
}

// waitHTTP polls url until it answers 200 with want in the body.
func waitHTTP(ctx context.Context, hc *http.Client, url, want string) error {
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(want)) {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
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
func (a *applier) HandleWarningHeader(code int, agent, text string) {
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
