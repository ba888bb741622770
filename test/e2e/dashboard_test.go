package e2e

// dashboard_test.go: the dashboard and the demo room in a real browser.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
)

const (
	// chromiumPath is Debian's chromium; the test never downloads a browser.
	chromiumPath = "/usr/bin/chromium"
	// browserTimeout bounds the whole browser script; each of its waits
	// has its own 20 s deadline, and it takes about 15 s when all is well.
	browserTimeout = 3 * time.Minute
	// browserStaleAfter is below deadAfter, as make run's, so a hung node
	// is shown stale for over a second (the dashboard redraws every
	// second) before it is reaped.
	browserStaleAfter = 600 * time.Millisecond
)

// TestDashboardInBrowser runs test/compat/browser/demo-room.js (headless
// Chromium through playwright-core) against redis, two wsnodes, a cleaner
// and httpapi --dashboard, with a capacity of 1 on presence-room-demo: two
// visitors of the demo room, one admitted and one waiting at position 1,
// then admitted when the first closes the tab; wsnode B SIGKILLed and shown
// reaped on the dashboard with the counts corrected; wsnode A SIGSTOPped
// and shown stale, then reaped, then no node holding a connection; the
// admitted visitor's room line following the waiting list.
// HC_SCREENSHOTS=1 writes docs/dashboard.png and docs/demo-room.png.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end browser test: skipped with -short")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("headless Chromium is needed for this test and %s is missing: run `bash scripts/ensure-deps.sh` as root "+
			"(make test does; it runs `apt-get install chromium chromium-driver`), or install Debian's chromium and chromium-driver packages: %v",
			chromiumPath, err)
	}
	compatDir := filepath.Join(repoRoot(t), "test", "compat")
	for _, pkg := range []string{"playwright-core", "pusher-js"} {
		if _, err := os.Stat(filepath.Join(compatDir, "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("%s is not installed in test/compat/node_modules: run `make deps` (it runs npm ci in test/compat): %v", pkg, err)
		}
	}
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (Node 20+ is needed for playwright-core): run `make deps` or install nodejs")
	}

	appsFile := writeAppsFile(t, []map[string]any{{
		"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret,
		"capacities": []map[string]any{{"prefix": "presence-room-demo", "capacity": 1}},
		"admission":  map[string]int{"graceSeconds": 1, "ticketSeconds": 30, "dropoutSeconds": 30},
	}})

	srv := redistest.New(t)
	common := []string{"--redis", srv.URL(), "--apps-file", appsFile}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	// Named as make run names its first cleaner: the dashboard shows it.
	cl := startCleaner(t, "cleaner", append(common, "--node-id", "cleaner-1")...)
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", append(common, "--addr", api.addr, "--admin-addr", api.admin,
		"--dashboard", "--demo-ws", a.addr, "--stale-after", browserStaleAfter.String())...)
	for _, n := range []node{a, b, cl, api} {
		waitReady(t, n.p, n.admin)
	}
	// Other traffic for the dashboard to show: news on both nodes, sports
	// on B only, so B's death changes both.
	const onB, onA = 4, 2
	pusherClients(t, b.addr, onB, "news", "sports")
	pusherClients(t, a.addr, onA, "news")

	screenshots := ""
	if os.Getenv("HC_SCREENSHOTS") == "1" {
		screenshots = filepath.Join(repoRoot(t), "docs")
		if err := os.MkdirAll(screenshots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "browser/demo-room.js")
	cmd.Dir = compatDir
	cmd.Env = append(os.Environ(),
		"HC_HTTP="+api.addr,
		"HC_NODE_A=ws-a", "HC_NODE_B=ws-b", "HC_CLEANER=cleaner-1",
		"HC_NEWS_BEFORE="+strconv.Itoa(onA+onB), "HC_NEWS_AFTER="+strconv.Itoa(onA),
		"HC_SPORTS="+strconv.Itoa(onB),
		// A's clients and the second visitor (the first closed her tab).
		"HC_CONNS_AFTER="+strconv.Itoa(onA+1),
		"HC_SCREENSHOT_DIR="+screenshots,
	)
	// On timeout, SIGTERM lets playwright close Chromium (which runs in a
	// process group of its own); WaitDelay then kills what is left.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &proctest.Buffer{}
	cmd.Stderr = stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("node browser/demo-room.js: %v", err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var said []string
	for line := range lines {
		said = append(said, line)
		switch line {
		case "KILL":
			b.p.kill(t)
			t.Logf("SIGKILLed wsnode ws-b at %v", time.Since(began).Round(100*time.Millisecond))
			if _, err := fmt.Fprintln(stdin, "killed"); err != nil {
				t.Errorf("tell the script wsnode B is dead: %v", err)
			}
		case "STOP":
			// The test's cleanup SIGKILLs it, which a stopped process obeys.
			a.p.signal(syscall.SIGSTOP)
			t.Logf("SIGSTOPped wsnode ws-a at %v", time.Since(began).Round(100*time.Millisecond))
			if _, err := fmt.Fprintln(stdin, "stopped"); err != nil {
				t.Errorf("tell the script wsnode A is stopped: %v", err)
			}
		}
	}
	_ = stdin.Close()
	err = cmd.Wait()
	took := time.Since(began).Round(100 * time.Millisecond)
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the browser script did not finish within %v; its log:\n%s", browserTimeout, stderr.String())
	case err != nil:
		t.Fatalf("the browser script failed after %v (%v); stdout %q; its log:\n%s", took, err, said, stderr.String())
	case strings.Join(said, ",") != "KILL,STOP,OK":
		t.Fatalf("the browser script said %q, want KILL, STOP, then OK; its log:\n%s", said, stderr.String())
	}
	t.Logf("browser script passed in %v; its log:\n%s", took, stderr.String())
}
