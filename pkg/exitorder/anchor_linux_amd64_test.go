package exitorder_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/pkg/exitorder"
)

// anchorEnv makes the test binary a process with an exit anchor: it dials
// the address in the variable, starts the anchor, dials it twice more,
// placing the first of those (exitorder.Placer) and not the second, writes
// "<pid> <pid> <placed fd> <plain fd>\n" (two calls' answers, then the
// two connections' descriptors), and obeys one byte on the first
// connection: 'c' closes it, 'x' exits 0, 'a' writes Anchored() ("true\n"
// or "false\n"). It logs to stderr. With unwokenEnv set, no thread of it
// wakes the anchor as it dies (exitorder.SetWatchers(0)).
const anchorEnv, unwokenEnv = "EXITORDER_ANCHOR_TEST", "EXITORDER_ANCHOR_UNWOKEN"

// anchorName is the test anchor's name, as /proc/<pid>/comm shows it.
const anchorName, holderName = "exitorder-test", "exitorder-mem"

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
	if os.Getenv(unwokenEnv) != "" {
		exitorder.SetWatchers(0)
	}
	first, err := exitorder.StartAnchor(anchorName, holderName, log)
	if err != nil {
		fail(err)
	}
	again, err := exitorder.StartAnchor("other", "other", log)
	if err != nil {
		fail(err)
	}
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	placer := exitorder.New(64, lim.Cur, log)
	var fds [2]int
	var keep []net.Conn // open until the process ends
	for i := range fds {
		d, err := net.Dial("tcp", addr) //nolint:gosec // G704: the loopback listener of the parent test
		if err != nil {
			fail(err)
		}
		fds[i] = descriptor(d)
		if i == 0 {
			d = placer.Conn(d)
		}
		keep = append(keep, d)
	}
	if _, err := fmt.Fprintf(c, "%d %d %d %d\n", first, again, fds[0], fds[1]); err != nil {
		fail(err)
	}
	defer runtime.KeepAlive(keep)
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

// descriptor is c's descriptor.
func descriptor(c net.Conn) int {
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		panic(err)
	}
	fd := -1
	_ = raw.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// anchored is a process with an exit anchor and the test's end of its
// connections.
type anchored struct {
	cmd    *exec.Cmd
	conn   net.Conn
	lines  *bufio.Reader // the connection's lines
	anchor int
	stderr *proctest.Buffer
	// placed and plain are the test's ends of the process's placed and
	// unplaced connections; placedFD and plainFD their descriptors there.
	placed, plain     net.Conn
	placedFD, plainFD int
}

func startAnchored(t *testing.T, env ...string) *anchored {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := &anchored{stderr: &proctest.Buffer{}}
	a.cmd = exec.Command(os.Args[0], "-test.run=^$")
	a.cmd.Env = append(append(os.Environ(), anchorEnv+"="+ln.Addr().String()), env...)
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
	for _, c := range []*net.Conn{&a.placed, &a.plain} {
		if *c, err = ln.Accept(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = (*c).Close() })
	}
	_ = a.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	a.lines = bufio.NewReader(a.conn)
	line, err := a.lines.ReadString('\n')
	if err != nil {
		t.Fatalf("no pids from the anchored process: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != f[1] {
		t.Fatalf("the anchored process wrote %q, want one pid twice and two descriptors", line)
	}
	if a.anchor, err = strconv.Atoi(f[0]); err != nil || a.anchor <= 0 {
		t.Fatalf("anchor pid %q", f[0])
	}
	// An anchor that failed to see the process end would hold its
	// descriptors, this test binary's output among them, for ever.
	t.Cleanup(func() {
		if !gone(a.anchor) {
			_ = syscall.Kill(a.anchor, syscall.SIGKILL)
		}
	})
	a.placedFD, _ = strconv.Atoi(f[2])
	a.plainFD, _ = strconv.Atoi(f[3])
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

// waitFor polls cond every millisecond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// childNamed polls for the child of parent named name and returns its pid.
func childNamed(t *testing.T, parent int, name string) int {
	t.Helper()
	found := 0
	waitFor(t, "a child named "+name, func() bool {
		found = proctest.Children(parent)[name]
		return found != 0
	})
	return found
}

// gone: pid has exited (a zombie until its new parent reaps it).
func gone(pid int) bool {
	state, ok := proctest.Status(pid, "State")
	return !ok || strings.HasPrefix(state, "Z")
}

// TestAnchorSharesFilesNotMemory checks what the anchor is: a child of
// the process, named, sharing its descriptor table and not its memory
// (kcmp(2)), of which it keeps a few pages, beside a holder sharing the
// memory and not the descriptors; alive however often it is
// stopped and moved between CPUs, which makes the kernel update a forked
// thread's rseq(2) area (glibc registers one per thread: had the anchor
// unmapped it, that update would kill it); and a connection the process
// closes closes at once.
func TestAnchorSharesFilesNotMemory(t *testing.T) {
	a := startAnchored(t)
	pid := a.cmd.Process.Pid
	if ppid, _ := proctest.Status(a.anchor, "PPid"); ppid != strconv.Itoa(pid) {
		t.Errorf("the anchor's parent is %q, want %d", ppid, pid)
	}
	// The anchor names itself and gives back its copy of the memory once
	// it runs, which a loaded machine may delay past StartAnchor's return.
	waitFor(t, "the anchor is named "+anchorName, func() bool {
		name, _ := proctest.Status(a.anchor, "Name")
		return name == anchorName
	})
	waitFor(t, "the anchor holds at most 64 kB of memory", func() bool {
		size, _ := proctest.Status(a.anchor, "VmSize")
		kb, err := strconv.Atoi(strings.TrimSuffix(size, " kB"))
		return err == nil && kb <= 64
	})
	if same, ok := proctest.SharesFiles(pid, a.anchor); !ok {
		t.Log("kcmp(2) is not allowed here: the shared descriptors go unchecked")
	} else if !same {
		t.Error("the anchor does not share the process's descriptors")
	}
	if same, ok := proctest.SharesMemory(pid, a.anchor); ok && same {
		t.Error("the anchor shares the process's memory")
	}
	holder := childNamed(t, pid, holderName)
	if same, ok := proctest.SharesMemory(pid, holder); ok && !same {
		t.Error("the holder does not share the process's memory")
	}
	if same, ok := proctest.SharesFiles(pid, holder); ok && same {
		t.Error("the holder shares the process's descriptors")
	}
	if cpus := runtime.NumCPU(); cpus > 1 {
		for i := range 200 {
			set := unix.CPUSet{}
			set.Set(i % cpus)
			_ = unix.SchedSetaffinity(a.anchor, &set)
			_ = syscall.Kill(a.anchor, syscall.SIGSTOP)
			_ = syscall.Kill(a.anchor, syscall.SIGCONT)
		}
	}
	require.Equal(t, "true", a.askAnchored(t), "the anchor ended")
	a.send(t, 'c')
	_ = a.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.conn.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("the process closed its connection, yet it reads: %v", err)
	}
}

// TestAnchorShutsPlacedConnections: when the process is killed, its
// anchor shuts its placed connection down (the peer reads the end although
// this test holds the socket too, by pidfd_getfd(2)), and only releases the
// unplaced one (held here, it stays open).
func TestAnchorShutsPlacedConnections(t *testing.T) {
	a := startAnchored(t)
	pidfd, err := unix.PidfdOpen(a.cmd.Process.Pid, 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	for _, fd := range []int{a.placedFD, a.plainFD} {
		held, err := unix.PidfdGetfd(pidfd, fd, 0)
		if err != nil {
			t.Skipf("pidfd_getfd: %v: the socket cannot be held here", err)
		}
		defer unix.Close(held)
	}
	_ = a.cmd.Process.Kill()
	waitFor(t, "the anchor ends", func() bool { return gone(a.anchor) })
	// The anchor is gone: whatever it sent has arrived.
	if !ended(t, a.placed) {
		t.Error("the placed connection was not shut down: its peer reads no end")
	}
	if ended(t, a.plain) {
		t.Error("the unplaced connection ended although this test holds its socket")
	}
}

// TestAnchorLooksAtTheProcess: an anchor that no thread's exit wakes (as
// on older kernels in a death that dumps core, which leave the word
// alone) still sees the process end, by its pidfd, and shuts the
// placed connection down; else it would hold the dead process's sockets
// open for ever.
func TestAnchorLooksAtTheProcess(t *testing.T) {
	a := startAnchored(t, unwokenEnv+"=1")
	require.Equal(t, "true", a.askAnchored(t))
	_ = a.cmd.Process.Kill()
	waitFor(t, "the anchor ends", func() bool { return gone(a.anchor) })
	if !ended(t, a.placed) {
		t.Error("the placed connection did not end")
	}
}

// ended peeks at c without waiting: true once its peer has shut it down,
// false while it is open with nothing to read.
func ended(t *testing.T, c net.Conn) bool {
	t.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	var n int
	var rerr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		n, _, rerr = syscall.Recvfrom(int(fd), make([]byte, 1), syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}))
	if rerr == syscall.EAGAIN {
		return false
	}
	require.NoError(t, rerr)
	require.Zero(t, n, "the connection has data")
	return true
}

// TestAnchorEndsWithProcess: the anchor and its holder end after the
// process, whether the process exits or is killed, and never before it.
func TestAnchorEndsWithProcess(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run("killed="+strconv.FormatBool(kill), func(t *testing.T) {
			a := startAnchored(t)
			holder := childNamed(t, a.cmd.Process.Pid, holderName)
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
			waitFor(t, "the holder ends", func() bool { return gone(holder) })
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
	if log := a.stderr.String(); !strings.Contains(log, "why=\"signal 9 (killed)\"") || !strings.Contains(log, "pid="+strconv.Itoa(a.anchor)) {
		t.Errorf("the log does not say the anchor was killed:\n%s", log)
	}
	waitFor(t, "the anchor is reaped", func() bool { _, ok := proctest.Status(a.anchor, "State"); return !ok })
	require.Equal(t, "false", a.askAnchored(t))
	if gone(a.cmd.Process.Pid) {
		t.Error("the process ended with its anchor")
	}
}
