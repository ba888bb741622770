package exitorder_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/pkg/exitorder"
)

// childEnv makes the test binary the killed process: it dials the address
// in the variable once unplaced ("early"), once placed, once placed by the
// Placer's Above ("above"), then plainSockets times, and waits to be
// killed.
const childEnv = "EXITORDER_TEST_DIAL"

const plainSockets = 3000

func TestMain(m *testing.M) {
	if addr := os.Getenv(childEnv); addr != "" {
		if spec := os.Getenv(memEnv); spec != "" {
			memChild(spec, addr)
		}
		child(addr)
		return
	}
	os.Exit(m.Run())
}

func child(addr string) {
	var keep []net.Conn
	dial := func(name string) net.Conn {
		c, err := net.Dial("tcp", addr) //nolint:gosec // G704: the loopback listener of the parent test
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if _, err := c.Write([]byte(name + "\n")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		keep = append(keep, c)
		return c
	}
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	p := exitorder.New(plainSockets, lim.Cur, nil)
	dial("early")
	keep = append(keep, p.Conn(dial("placed")))
	keep = append(keep, p.Above(256).Conn(dial("above")))
	for range plainSockets {
		dial("plain")
	}
	select {} // until killed
}

// TestKillClosesPlacedFirst kills a process holding thousands of sockets
// and reads, from one epoll set, the order their ends saw the FINs: the
// connection placed above the others' floor comes first, the placed one
// second, and the unplaced one opened first comes late. This is the kernel behaviour the package relies on; if a kernel
// stops closing last-released first, this test says so.
func TestKillClosesPlacedFirst(t *testing.T) {
	proctest.RaiseFileLimit(t, 2*plainSockets+2048)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+ln.Addr().String())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // killed: the error says so
		close(exited)
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()

	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(ep)
	names := map[int32]string{}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for len(conns) < plainSockets+3 {
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			t.Fatalf("after %d connections: %v", len(conns), err)
		}
		conns = append(conns, c)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		name, err := bufio.NewReader(c).ReadString('\n') // each sends its name alone, then nothing
		if err != nil {
			t.Fatal(err)
		}
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var cerr error
		if err := raw.Control(func(fd uintptr) {
			names[int32(fd)] = name[:len(name)-1]
			cerr = syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, int(fd),
				&syscall.EpollEvent{Events: syscall.EPOLLRDHUP, Fd: int32(fd)})
		}); err != nil || cerr != nil {
			t.Fatal(err, cerr)
		}
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	// epoll's ready list is in the order the ends were woken.
	events := make([]syscall.EpollEvent, len(conns)+1)
	var order []string
	deadline := time.Now().Add(30 * time.Second)
	for len(order) < len(conns) && time.Now().Before(deadline) {
		n, err := syscall.EpollWait(ep, events, 1000)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events[:n] {
			order = append(order, names[e.Fd])
			_ = syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, int(e.Fd), nil)
		}
	}
	if len(order) != len(conns) {
		t.Fatalf("%d of %d connections saw the close", len(order), len(conns))
	}
	at := map[string]int{}
	for i, name := range order {
		if name != "plain" {
			at[name] = i
		}
	}
	t.Logf("of %d closes: above %d, placed %d, early %d", len(order), at["above"], at["placed"], at["early"])
	if at["above"] != 0 {
		t.Errorf("the connection placed above closed %s, not first", ordinal(at["above"]))
	}
	if at["placed"] != 1 {
		t.Errorf("the placed connection closed %s, not second", ordinal(at["placed"]))
	}
	if at["early"] < len(order)/2 {
		t.Errorf("the unplaced connection opened first closed %s of %d: the kernel no longer closes the last released first, and placing may not be needed", ordinal(at["early"]), len(order))
	}
}

func ordinal(i int) string { return "at position " + strconv.Itoa(i+1) }

// TestPlacedCloseReachesPeer: Close releases the duplicate too, so the
// peer sees the close at once (a duplicate left open would hold the
// socket open forever); the placed connection keeps SyscallConn.
func TestPlacedCloseReachesPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := exitorder.New(2048, 1<<20, nil)
	if p.Floor() != 2048+1024 {
		t.Fatalf("floor %d, want %d", p.Floor(), 2048+1024)
	}
	if p.Above(128).Floor() != 2048+1024+128 || (exitorder.Placer{}).Above(128).Floor() != 0 {
		t.Fatal("Above moved the floor wrongly, or gave the zero Placer one")
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	placed := p.Conn(c)
	if placed == c {
		t.Fatal("not placed")
	}
	if _, ok := placed.(syscall.Conn); !ok {
		t.Fatal("placed connection lost SyscallConn")
	}
	if _, err := placed.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := placed.Close(); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2)
	if n, err := peer.Read(buf); n != 1 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	if _, err := peer.Read(buf); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the peer did not see the close: %v", err)
	}
}

// TestNothingPlacedWithoutALimit: an unknown limit or cap places nothing.
func TestNothingPlacedWithoutALimit(t *testing.T) {
	for _, p := range []exitorder.Placer{exitorder.New(0, 1<<20, nil), exitorder.New(1000, 0, nil), exitorder.New(10, 1024, nil), {}} {
		if p.Floor() != 0 {
			t.Errorf("floor %d", p.Floor())
		}
		var c net.Conn = &net.TCPConn{}
		if p.Conn(c) != c {
			t.Error("placed")
		}
	}
}
