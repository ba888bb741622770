package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerRejectsBrokenManifests shows the server-side run is not
// vacuous: a copy of deploy/k8s broken three ways fails on each. It needs
// the binaries `make k8s-validate-server` builds, named by
// K8S_DRYRUN_APISERVER and K8S_DRYRUN_ETCD, and skips without them.
func TestServerRejectsBrokenManifests(t *testing.T) {
	apiserver, etcd := os.Getenv("K8S_DRYRUN_APISERVER"), os.Getenv("K8S_DRYRUN_ETCD")
	if apiserver == "" || etcd == "" {
		t.Skip("K8S_DRYRUN_APISERVER and K8S_DRYRUN_ETCD not set (make k8s-validate-server sets them)")
	}
	root := t.TempDir()
	for _, dir := range []string{"base", "overlays"} {
		if out, err := exec.Command("cp", "-r", filepath.Join("..", "..", "..", dir), root).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v: %s", dir, err, out)
		}
	}
	edit := func(file, old, repl string) {
		t.Helper()
		p := filepath.Join(root, "base", file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("%s has no %q", file, old)
		}
		if err := os.WriteFile(p, bytes.Replace(b, []byte(old), []byte(repl), 1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Each is valid to kustomize and caught only by the API server:
	// Pod Security admission, strict field validation, field validation.
	edit("wsnode.yaml", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true")
	edit("cleaner.yaml", "  minAvailable: 1\n", "  minAvailable: 1\n  minAvaliable: 1\n")
	edit("httpapi.yaml", "maxSkew: 1", "maxSkew: 0")

	var out bytes.Buffer
	code := run([]string{"-root", root, "-kube-apiserver", apiserver, "-etcd", etcd, "-timeout", "3m"}, &out, &out)
	t.Log(out.String())
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{
		`would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false`,
		".spec.minAvaliable: field not declared in schema",
		"topologySpreadConstraints[0].maxSkew: Invalid value: 0",
		"0 passed, 2 failed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
