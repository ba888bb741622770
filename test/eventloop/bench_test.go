//go:build linux

package eventloop

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/internal/wstest"
)

// serveEnv makes the test binary a prototype server on its value, a
// loopback address: the benchmark measures the server's RSS in a process
// of its own, without the client sockets.
const serveEnv = "EVENTLOOP_SERVE"

// maxServe bounds a prototype server's life, should its parent vanish
// without closing its stdin.
const maxServe = 10 * time.Minute

func TestMain(m *testing.M) {
	if addr := os.Getenv(serveEnv); addr != "" {
		os.Exit(serve(addr))
	}
	os.Exit(m.Run())
}

// serve runs the prototype on addr until stdin ends or maxServe passes,
// after printing the bound address on stdout.
func serve(addr string) int {
	s, err := Listen(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	fmt.Println(s.Addr())
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	time.AfterFunc(maxServe, func() { os.Exit(0) })
	if err := s.Serve(stop); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// BenchmarkIdleSockets opens EVENTLOOP_SOCKETS (default 10,000) sockets,
// each subscribed to one of 100 public channels, to the prototype and then
// to a wsnode (with Redis), one server at a time, and reports each
// server's RSS growth per socket (after 100 warm-up sockets). The sockets
// are this process's, from wstest: no goroutine and one small buffer each.
func BenchmarkIdleSockets(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("EVENTLOOP_SOCKETS")); err == nil && v > 0 {
		n = v
	}
	if fit := proctest.RaiseFileLimit(b, n); fit < n {
		b.Fatalf("the open-file limit fits %d sockets, not %d: lower EVENTLOOP_SOCKETS", fit, n)
	}
	b.Run("eventloop", func(b *testing.B) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), serveEnv+"=127.0.0.1:0")
		addr := startChild(b, cmd, true)
		measure(b, cmd.Process.Pid, addr, n)
	})
	b.Run("wsnode", func(b *testing.B) {
		bin := filepath.Join(b.TempDir(), "wsnode")
		build := exec.Command("go", "build", "-o", bin, "github.com/headcount/headcount/cmd/wsnode")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build: %v\n%s", err, out)
		}
		srv := redistest.New(b)
		addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(b))
		admin := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(b))
		cmd := exec.Command(bin, "--redis", srv.URL(), "--addr", addr, "--admin-addr", admin,
			"--node-id", "eventloop-bench", "--max-sockets", strconv.Itoa(n+200))
		cmd.Env = append(os.Environ(), "HEADCOUNT_LOG_LEVEL=warn")
		startChild(b, cmd, false)
		waitReady(b, "http://"+admin+"/readyz")
		measure(b, cmd.Process.Pid, addr, n)
	})
}

// measure opens 100 warm-up sockets, then n more, and reports the RSS
// growth of the server pid per socket over the n.
func measure(b *testing.B, pid int, addr string, n int) {
	var conns []*wstest.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	open := func(count int) {
		for range count {
			c, err := wstest.Dial(addr, "/app/app-key?protocol=7")
			if err != nil {
				b.Fatalf("socket %d: %v", len(conns), err)
			}
			conns = append(conns, c)
			if _, err := c.Read(10 * time.Second); err != nil {
				b.Fatalf("socket %d handshake: %v", len(conns), err)
			}
			if err := c.Send(fmt.Sprintf(`{"event":"pusher:subscribe","data":{"channel":"idle-%d"}}`, len(conns)%100)); err != nil {
				b.Fatal(err)
			}
			reply, err := c.Read(10 * time.Second)
			if err != nil || !strings.Contains(reply, "subscription_succeeded") {
				b.Fatalf("socket %d subscribe: %q %v", len(conns), reply, err)
			}
		}
	}
	open(100)
	base := proctest.SettledRSS(b, pid)
	b.ResetTimer()
	open(n)
	b.StopTimer()
	b.ReportMetric(float64(proctest.SettledRSS(b, pid)-base)/1024/float64(n), "KiB/conn")
	b.ReportMetric(float64(n), "conns")
}

// startChild starts cmd with a pipe as stdin (its end stops a prototype
// server) and, if firstLine, returns the first line it prints; the child
// is killed when b ends.
func startChild(b *testing.B, cmd *exec.Cmd, firstLine bool) string {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var line string
	br := bufio.NewReader(stdout)
	if firstLine {
		line, _ = br.ReadString('\n')
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()
	return strings.TrimSpace(line)
}

func waitReady(b *testing.B, url string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("not ready at %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
