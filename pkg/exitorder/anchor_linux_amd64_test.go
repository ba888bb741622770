package exitorder_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/pkg/exitorder"
)

// anchorEnv makes the test binary a process with an exit anchor: it dials
// the address in the variable, then starts the anchor (so the anchor is
// born with a copy of that socket's descriptor), writes "<pid> <pid>\n"
// (two calls' answers), and obeys one byte: 'c' closes the connection,
// 'x' exits 0, 'a' writes Anchored() ("true\n" or "false\n"). It logs to
// stderr.
const anchorEnv = "EXITORDER_ANCHOR_TEST"

// anchorName is the test anchor's name, as /proc/<pid>/comm shows it.
const anchorName = "exitorder-test"

func init() {
	if addr := os.Getenv(anchorEnv); addr != "" {
		anchorChild(addr)
	}
}

func anchorChild(addr string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := net.Dial("tcp", addr) //nolint:gosec // G704: the loopback listener of the parent test
	if err != nil {
		fail(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Warn})
	first, err := exitorder.HoldMemory(anchorName, log)
	if err != nil {
		fail(err)
	}
	again, err := exitorder.HoldMemory("other", log)
	if err != nil {
		fail(err)
	}
	if _, err := fmt.Fprintf(c, "%d %d\n", first, again); err != nil {
		fail(err)
	}
	for {
		one := make([]byte, 1)
		if _, err := c.Read(one); err != nil {
			select {} // closed (or the test went): wait to be killed
		}
		switch one[0] {
		case 'c':
			_ = c.Close()
		case 'x':
			os.Exit(0)
		case 'a':
			if _, err := fmt.Fprintln(c, exitorder.Anchored()); err != nil {
				fail(err)
			}
		}
	}
}

// anchored is a process with an exit anchor and the test's end of its
// connection.
type anchored struct {
	cmd    *exec.Cmd
	conn   net.Conn
	lines  *bufio.Reader // the connection's lines
	anchor int
	stderr *proctest.Buffer
}

func startAnchored(t *testing.T) *anchored {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := &anchored{stderr: &proctest.Buffer{}}
	a.cmd = exec.Command(os.Args[0], "-test.run=^$")
	a.cmd.Env = append(os.Environ(), anchorEnv+"="+ln.Addr().String())
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = a.cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = a.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("the anchored process's stderr:\n%s", a.stderr.String())
		}
	})
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	if a.conn, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.conn.Close() })
	_ = a.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	a.lines = bufio.NewReader(a.conn)
	line, err := a.lines.ReadString('\n')
	if err != nil {
		t.Fatalf("no pids from the anchored process: %v", err)
	}
	pids := strings.Fields(line)
	if len(pids) != 2 || pids[0] != pids[1] {
		t.Fatalf("HoldMemory twice answered %q, want one pid twice", line)
	}
	if a.anchor, err = strconv.Atoi(pids[0]); err != nil || a.anchor <= 0 {
		t.Fatalf("anchor pid %q", pids[0])
	}
	return a
}

// send writes one command byte to the anchored process.
func (a *anchored) send(t *testing.T, cmd byte) {
	t.Helper()
	if _, err := a.conn.Write([]byte{cmd}); err != nil {
		t.Fatal(err)
	}
}

// anchored asks the process for exitorder.Anchored.
func (a *anchored) askAnchored(t *testing.T) string {
	t.Helper()
	a.send(t, 'a')
	_ = a.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := a.lines.ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(line)
}

// procField returns the value of field ("PPid", "State") in
// /proc/<pid>/status, and false once pid is gone.
func procField(pid int, field string) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "", false
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", true
}

// fds lists pid's open descriptors as their /proc links.
func fds(pid int) []string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink(dir + e.Name())
		out = append(out, l)
	}
	return out
}

// waitFor polls cond every millisecond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// gone: pid has exited (a zombie until its new parent reaps it).
func gone(pid int) bool {
	state, ok := procField(pid, "State")
	return !ok || strings.HasPrefix(state, "Z")
}

// TestAnchorSharesMemoryHoldsNoFiles checks what the anchor is: a child of
// the process, named, in the process's memory (kcmp(2)), holding one
// descriptor (its pidfd) although it was born with a copy of the
// process's table, so a connection the process closes closes at once.
func TestAnchorSharesMemoryHoldsNoFiles(t *testing.T) {
	a := startAnchored(t)
	pid := a.cmd.Process.Pid
	if ppid, _ := procField(a.anchor, "PPid"); ppid != strconv.Itoa(pid) {
		t.Errorf("the anchor's parent is %q, want %d", ppid, pid)
	}
	// The anchor names itself once it runs, which a loaded machine may
	// delay past HoldMemory's return: until then it has the process's name.
	waitFor(t, "the anchor is named "+anchorName, func() bool {
		name, _ := procField(a.anchor, "Name")
		return name == anchorName
	})
	const sysKcmp, kcmpVM = 312, 1 // amd64's number: package syscall does not name it
	same, _, errno := syscall.Syscall6(sysKcmp, uintptr(pid), uintptr(a.anchor), kcmpVM, 0, 0, 0)
	switch {
	case errno == syscall.EPERM || errno == syscall.ENOSYS:
		t.Logf("kcmp(2) is not allowed here (%v): the shared memory goes unchecked", errno)
	case errno != 0:
		t.Fatal(errno)
	case same != 0:
		t.Error("the anchor does not share the process's memory")
	}
	waitFor(t, "the anchor holds its pidfd alone", func() bool {
		f := fds(a.anchor)
		return len(f) == 1 && f[0] == "anon_inode:[pidfd]"
	})
	a.send(t, 'c')
	_ = a.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.conn.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("the process closed its connection, yet it reads: %v", err)
	}
	if gone(a.anchor) {
		t.Error("the anchor ended while the process lives")
	}
}

// TestAnchorEndsWithProcess: the anchor ends after the process, whether
// the process exits or is killed, and never before it.
func TestAnchorEndsWithProcess(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run("killed="+strconv.FormatBool(kill), func(t *testing.T) {
			a := startAnchored(t)
			if kill {
				_ = a.cmd.Process.Kill()
			} else {
				a.send(t, 'x')
			}
			_ = a.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := a.conn.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
				t.Fatalf("the process ended, yet its connection reads: %v", err)
			}
			waitFor(t, "the anchor ends", func() bool { return gone(a.anchor) })
		})
	}
}

// TestAnchorKilledIsLogged: an anchor killed while its process lives is
// reaped and said, Anchored turns false, and the process goes on.
func TestAnchorKilledIsLogged(t *testing.T) {
	a := startAnchored(t)
	require.Equal(t, "true", a.askAnchored(t))
	if err := syscall.Kill(a.anchor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the process logs the anchor's end", func() bool {
		return strings.Contains(a.stderr.String(), "the exit anchor ended")
	})
	if log := a.stderr.String(); !strings.Contains(log, "why=\"signal 9 (killed)\"") || !strings.Contains(log, "anchor_pid="+strconv.Itoa(a.anchor)) {
		t.Errorf("the log does not say the anchor was killed:\n%s", log)
	}
	waitFor(t, "the anchor is reaped", func() bool { _, ok := procField(a.anchor, "State"); return !ok })
	require.Equal(t, "false", a.askAnchored(t))
	if gone(a.cmd.Process.Pid) {
		t.Error("the process ended with its anchor")
	}
}
