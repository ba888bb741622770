package exitorder_test

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/pkg/exitorder"
)

// memEnv makes the test binary a killed process holding memory: "<MiB>",
// then any of ",huge" (the memory advised onto 2 MiB pages), ",anchor"
// (with an exit anchor), ",pid1" (started in a PID namespace of its own,
// killToClose reads it) and ",fds=<n>" (n more descriptors open, below
// the connection's, as a node's client sockets are), dialling the address
// in childEnv once and placing that connection, then waiting to be killed.
const memEnv = "EXITORDER_BENCH_MIB"

// madvHugepage is MADV_HUGEPAGE, which package syscall does not name.
const madvHugepage = 14

func memChild(spec, addr string) {
	opts := strings.Split(spec, ",")
	n, err := strconv.Atoi(opts[0])
	if err != nil {
		os.Exit(2)
	}
	mem := make([]byte, n<<20)
	fds := 0
	for _, o := range opts[1:] {
		switch {
		case o == "huge" && n > 0:
			if err := syscall.Madvise(mem, madvHugepage); err != nil {
				os.Exit(3)
			}
		case o == "anchor":
			if _, err := exitorder.StartAnchor("exitorder-test", "exitorder-mem", hclog.NewNullLogger()); err != nil {
				os.Exit(4)
			}
		case strings.HasPrefix(o, "fds="):
			fds, _ = strconv.Atoi(strings.TrimPrefix(o, "fds="))
		}
	}
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1 // resident, as a heap in use is
	}
	for range fds / 2 {
		if _, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0); err != nil {
			os.Exit(5)
		}
	}
	c, err := net.Dial("tcp", addr) //nolint:gosec // G704: the loopback listener of the parent benchmark
	if err != nil {
		os.Exit(2)
	}
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	c = exitorder.New(fds, lim.Cur, nil).Conn(c) // above the other descriptors, as a node's are
	_, _ = c.Write([]byte{1})
	resident = mem
	select {} // until killed
}

// resident keeps memChild's memory reachable until the process dies.
var resident []byte

// BenchmarkKillToFirstClose measures the kernel's part of learning of a
// death: from SIGKILL of a process holding one placed connection until its
// peer reads the close, for a process with 0, 50 and 200 MiB resident, 200
// MiB on 2 MiB pages, and 50 and 200 MiB with an exit anchor
// (StartAnchor), the last also with 16,000 more descriptors open, and that
// once more as the init of a PID namespace (a container's process). Linux
// frees a dying process's memory before it closes any of its descriptors,
// and walks them all before it releases the first, so no placement of a
// connection can make its close come sooner than that; an anchor, which
// shuts the connection down as the process dies, can. Ten kills each; the
// median is reported. Run it with
//
//	go test -run '^$' -bench KillToFirstClose -benchtime 1x ./pkg/exitorder/
func BenchmarkKillToFirstClose(b *testing.B) {
	proctest.RaiseFileLimit(b, 17000) // the children inherit it
	for _, spec := range []string{"0", "50", "200", "200,huge", "50,anchor", "200,anchor", "50,anchor,fds=16000", "50,anchor,fds=16000,pid1"} {
		b.Run("mib="+spec, func(b *testing.B) {
			if strings.Contains(spec, ",anchor") && runtime.GOARCH != "amd64" {
				b.Skip("no exit anchor on " + runtime.GOARCH)
			}
			var times []time.Duration
			for range b.N * 10 {
				times = append(times, killToClose(b, spec))
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
			b.ReportMetric(float64(times[len(times)-1].Microseconds())/1000, "ms-max")
		})
	}
}

func killToClose(b *testing.B, spec string) time.Duration {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), memEnv+"="+spec, childEnv+"="+ln.Addr().String())
	cmd.Stderr = os.Stderr
	if strings.HasSuffix(spec, ",pid1") {
		// The init of a PID namespace, as a container's process is: its
		// death kills the namespace's other processes (the anchor).
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			b.Skipf("no PID namespace here: %v", err)
		}
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	one := make([]byte, 1)
	if _, err := c.Read(one); err != nil { // the child's memory is resident once it writes
		b.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Read(one); err == nil {
		b.Fatal("read a byte from a killed process")
	}
	return time.Since(killed)
}
