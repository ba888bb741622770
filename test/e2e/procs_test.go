package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/proctest"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// TestMain removes the binaries the run built: 76-86 MB each run, which
// filled a long-lived machine's /tmp when they were left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds cmd/wsnode, cmd/cleaner and cmd/httpapi once per test run.
func binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "headcount-e2e-bin")
		if buildErr != nil {
			return
		}
		// Stamped as make build stamps them, so --version can be checked.
		ldflags, err := exec.Command("bash", filepath.Join(repoRoot(t), "scripts", "version-ldflags.sh")).Output()
		if err != nil {
			buildErr = fmt.Errorf("scripts/version-ldflags.sh: %w", err)
			return
		}
		cmd := exec.Command("go", "build", "-buildvcs=auto", "-ldflags", strings.TrimSpace(string(ldflags)),
			"-o", binDir+"/", "./cmd/wsnode", "./cmd/cleaner", "./cmd/httpapi")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func repoRoot(t testing.TB) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}

// proc is one running binary whose output goes to a log file, shown when
// the test fails.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start runs bin (a headcount binary by name, or an absolute path) with
// args, its output in a log printed if the test fails; cleanup kills it.
func start(t testing.TB, name, bin string, args ...string) *proc {
	t.Helper()
	return startEnv(t, name, bin, nil, args...)
}

// startEnv is start with env added to this process's environment.
func startEnv(t testing.TB, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(binaries(t), bin)
	}
	p := &proc{name: name, cmd: exec.Command(bin, args...), log: logPath, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(append(os.Environ(), "HEADCOUNT_LOG_LEVEL=debug"), env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("---- %s log (last 60 lines) ----\n%s", name, lastLines(b, 60))
		}
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *proc) kill(t testing.TB) {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die", p.name)
	}
}

// wait returns the exit code once the process ends, failing after timeout.
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s still running after %v", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freeAddr(t testing.TB) string {
	return "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
}

// waitReady polls /readyz on an admin address until it answers 200.
func waitReady(t testing.TB, p *proc, admin string) {
	t.Helper()
	waitOK(t, p, "http://"+admin+"/readyz", 20*time.Second)
}

// waitOK polls url until it answers 200, failing t if p exits first or
// within fails to pass.
func waitOK(t testing.TB, p *proc, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready: %v", p.name, p.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready at %s: %v", p.name, url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric is the sum of name's series with labels (name, value pairs) on
// an admin address's /metrics, or -1 when it cannot be read or has none.
func metric(admin, name string, labels ...string) float64 {
	f, err := metricstest.Scrape("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	return f.Value(name, labels...)
}

// metricSum is metric with 0 for none: a labelled series is on /metrics
// only once something touched it.
func metricSum(admin, name string, labels ...string) float64 {
	f, err := metricstest.Scrape("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	v, _ := f.Sum(name, labels...)
	return v
}

// pusherClients runs test/compat/clients.js: n real pusher-js clients on
// host subscribed to channels. It returns once all are subscribed; the
// clients disconnect when the test ends (or after their own max lifetime).
func pusherClients(t testing.TB, host string, n int, channels ...string) {
	t.Helper()
	pusherClientsOf(t, e2eAppKey, host, n, channels...)
}

// pusherClientsOf is pusherClients for the app of key.
func pusherClientsOf(t testing.TB, key, host string, n int, channels ...string) {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "test", "compat")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "pusher-js")); err != nil {
		t.Fatal("pusher-js is not installed: run `make test` (it runs npm ci in test/compat)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "node", "clients.js", "--hosts", host, "--key", key, "--clients", strconv.Itoa(n),
		"--channels", strings.Join(channels, ","), "--max-seconds", "300")
	cmd.Dir = dir
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
	if err := cmd.Start(); err != nil {
		t.Fatalf("node clients.js: %v", err)
	}
	t.Cleanup(func() {
		_ = stdin.Close() // clients.js disconnects and exits when stdin closes
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cancel()
			<-done
		}
		cancel()
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		if want := fmt.Sprintf(`{"ready":%d}`, n); strings.TrimSpace(line) != want {
			t.Fatalf("clients.js said %q, want %s; stderr:\n%s", line, want, stderr.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("pusher-js clients on %s never all subscribed; stderr:\n%s", host, stderr.String())
	}
}

// node is one started binary and its addresses.
type node struct {
	p     *proc
	addr  string
	admin string
}

// startWSNode starts a wsnode named name (also its --node-id) with the
// suite's heartbeat and drain, plus extra flags (the Redis to use).
func startWSNode(t testing.TB, name string, extra ...string) node {
	n := node{addr: freeAddr(t), admin: freeAddr(t)}
	n.p = start(t, name, "wsnode", append(slices.Clone(extra), "--addr", n.addr, "--admin-addr", n.admin,
		"--node-id", name, "--heartbeat", heartbeat.String(), "--drain", drain.String())...)
	return n
}

// startCleaner starts a cleaner with the suite's dead-after, scan interval
// and lease TTL, plus extra flags.
func startCleaner(t testing.TB, name string, extra ...string) node {
	n := node{admin: freeAddr(t)}
	n.p = start(t, name, "cleaner", append(slices.Clone(extra), "--admin-addr", n.admin,
		"--dead-after", deadAfter.String(), "--scan-interval", scanInterval.String(), "--lease-ttl", leaseTTL.String())...)
	return n
}

// writeAppsFile writes apps, JSON-encoded, as an apps file in the test's
// temporary directory and returns its path.
func writeAppsFile(t testing.TB, apps any) string {
	t.Helper()
	b, err := json.Marshal(apps)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "apps.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
