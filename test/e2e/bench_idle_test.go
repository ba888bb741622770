package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headcount/headcount/pkg/wsclient"
)

// idleConns are sockets the idle-memory benchmarks hold open: bare file
// descriptors in blocking mode, opened and read with plain syscalls. No
// goroutine, no buffer and no netpoller registration per socket on this
// side, so 100,000 of them cost this process 32 bytes each and the
// kernel nothing but the sockets themselves (no epoll item of this
// process: the client's half is a TCP socket, its inode, file and dentry).
type idleConns struct {
	mu     sync.Mutex
	fds    []int
	active []time.Time // when each socket last sent a frame
	stop   func()      // stops keepAlive
}

func (c *idleConns) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.fds)
}

// keepAlive pings, as pusher-js does, each socket that has been silent
// for 90 s and reads its pong, until close or kernelShare stops it. The
// wsnode closes a socket silent for 180 s (activity_timeout and a
// minute), and a slow machine may take longer than that to open and
// measure 100,000 sockets. Answering a ping leaves a socket as idle as
// answering its subscribe did, with nothing left to read.
func (c *idleConns) keepAlive(b testing.TB) {
	done, stopped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.stop = func() {
		once.Do(func() { close(done) })
		<-stopped
	}
	go func() {
		defer close(stopped)
		ping := wsclient.TextFrame(`{"event":"pusher:ping","data":{}}`)
		buf := make([]byte, 512)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			c.mu.Lock()
			var due []int
			for i, at := range c.active {
				if time.Since(at) > 90*time.Second {
					due = append(due, i)
				}
			}
			fds := c.fds
			c.mu.Unlock()
			for _, i := range due {
				select {
				case <-done:
					return
				default:
				}
				if err := writeAll(fds[i], ping); err != nil {
					b.Errorf("keepalive ping on socket %d: %v", i, err)
					return
				}
				if _, err := readUntil(fds[i], buf, 0, "pusher:pong"); err != nil {
					b.Errorf("keepalive pong on socket %d: %v", i, err)
					return
				}
				c.mu.Lock()
				c.active[i] = time.Now()
				c.mu.Unlock()
			}
		}
	}()
}

func (c *idleConns) close() {
	if c.stop != nil {
		c.stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fd := range c.fds {
		_ = syscall.Close(fd)
	}
	c.fds = nil
}

// drain reads each socket until it has nothing more to read without
// waiting (after its peer's end, the FIN, which a socket holds a buffer
// for until it is read).
func (c *idleConns) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var buf [512]byte
	for _, fd := range c.fds {
		_ = syscall.SetNonblock(fd, true)
		for {
			n, err := syscall.Read(fd, buf[:])
			if n <= 0 || err != nil {
				break
			}
		}
	}
}

// idleSourcePerAddr is how many sockets go out from one loopback source
// address: connect(2) draws a port per (source, destination) pair from
// ip_local_port_range (32768-60999 by default, 28,232 ports).
const idleSourcePerAddr = 20000

// idleOpeners is how many sockets are being opened at once.
const idleOpeners = 8

// openIdle opens count sockets to addr, each subscribed to one of the
// public channels idle-0..idle-99, from idleOpeners goroutines, spread
// over the source addresses 127.0.0.2.. (one per idleSourcePerAddr of the
// conns already open and to open), and adds them to conns.
func openIdle(b testing.TB, addr string, count int, conns *idleConns) {
	b.Helper()
	openIdleOn(b, addr, count, conns, func(i int) string { return fmt.Sprintf("idle-%d", i%100) })
}

// openIdleOn is openIdle with the i-th socket of conns subscribed to
// channel(i).
func openIdleOn(b testing.TB, addr string, count int, conns *idleConns, channel func(i int) string) {
	b.Helper()
	dst, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		b.Fatal(err)
	}
	first := conns.len()
	sources := (first+count)/idleSourcePerAddr + 1
	next := make(chan int, idleOpeners)
	errs := make(chan error, idleOpeners)
	var wg sync.WaitGroup
	for range idleOpeners {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for i := range next {
				src := [4]byte{127, 0, byte((2 + i%sources) >> 8), byte(2 + i%sources)}
				fd, err := dialIdle(src, dst, addr, channel(i), buf)
				if err != nil {
					errs <- fmt.Errorf("socket %d: %w", i, err)
					return
				}
				conns.mu.Lock()
				conns.fds = append(conns.fds, fd)
				conns.active = append(conns.active, time.Now())
				conns.mu.Unlock()
			}
		})
	}
	func() {
		defer close(next)
		for i := first; i < first+count; i++ {
			select {
			case next <- i:
			case err := <-errs:
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// dialIdle opens one socket from src to dst (addr as host:port), upgrades
// it, waits for pusher:connection_established, subscribes to channel and
// waits for the subscription to succeed, all with blocking syscalls under
// a 10 s timeout each. buf is the caller's scratch buffer.
func dialIdle(src [4]byte, dst *net.TCPAddr, addr, channel string, buf []byte) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return -1, err
	}
	syscall.CloseOnExec(fd)
	fail := func(err error) (int, error) {
		_ = syscall.Close(fd)
		return -1, err
	}
	tv := syscall.NsecToTimeval(int64(10 * time.Second))
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv)
	// IP_BIND_ADDRESS_NO_PORT (Linux; elsewhere the bind picks the port):
	// connect picks a port per destination, not bind one per source.
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_IP, 24, 1)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: src}); err != nil {
		return fail(fmt.Errorf("bind %v: %w", net.IP(src[:]), err))
	}
	var to syscall.SockaddrInet4
	copy(to.Addr[:], dst.IP.To4())
	to.Port = dst.Port
	if err := connectBlocking(fd, &to); err != nil {
		return fail(fmt.Errorf("connect from %v: %w", net.IP(src[:]), err))
	}
	head := "GET /app/" + e2eAppKey + "?protocol=7 HTTP/1.1\r\nHost: " + addr +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if err := writeAll(fd, []byte(head)); err != nil {
		return fail(err)
	}
	got, err := readUntil(fd, buf, 0, "connection_established")
	if err != nil {
		return fail(fmt.Errorf("handshake: %w", err))
	}
	if !bytes.HasPrefix(buf[:got], []byte("HTTP/1.1 101 ")) {
		return fail(fmt.Errorf("handshake answered %q", buf[:min(got, 40)]))
	}
	if err := writeAll(fd, wsclient.TextFrame(`{"event":"pusher:subscribe","data":{"channel":"`+channel+`"}}`)); err != nil {
		return fail(err)
	}
	if _, err := readUntil(fd, buf, 0, "subscription_succeeded"); err != nil {
		return fail(fmt.Errorf("subscribe: %w", err))
	}
	return fd, nil
}

// connectBlocking is connect(2) on a blocking socket. A signal (the Go
// runtime preempts with SIGURG) interrupts it with EINTR while the
// connection goes on being made: then it waits until the socket is
// writable (or 10 s) and reads the outcome from SO_ERROR.
func connectBlocking(fd int, to syscall.Sockaddr) error {
	err := syscall.Connect(fd, to)
	if err != syscall.EINTR {
		return err
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		n, err := unix.Poll(pfd, 10000)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("connect: no answer in 10 s")
		}
		break
	}
	soerr, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
	if err != nil {
		return err
	}
	if soerr != 0 {
		return syscall.Errno(soerr)
	}
	return nil
}

func writeAll(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := syscall.Write(fd, p)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// readUntil reads fd into buf from off until buf holds want, and returns
// how much it holds. The server's frames are small: what it sends before
// want fits buf.
func readUntil(fd int, buf []byte, off int, want string) (int, error) {
	for !bytes.Contains(buf[:off], []byte(want)) {
		if off == len(buf) {
			return off, fmt.Errorf("no %q in the first %d bytes", want, off)
		}
		n, err := syscall.Read(fd, buf[off:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return off, err
		}
		if n == 0 {
			return off, fmt.Errorf("EOF before %q: %q", want, buf[:off])
		}
		off += n
	}
	return off, nil
}

// slabs is the kernel's slab memory by cache (/proc/slabinfo, readable by
// root): active objects times object size, in bytes.
type slabs map[string]int64

// readSlabs returns nil where /proc/slabinfo cannot be read.
func readSlabs() slabs {
	f, err := os.Open("/proc/slabinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	out := slabs{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name active_objs num_objs objsize objperslab pagesperslab : ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || strings.HasPrefix(fs[0], "#") || fs[0] == "slabinfo" {
			continue
		}
		active, err1 := strconv.ParseInt(fs[1], 10, 64)
		size, err2 := strconv.ParseInt(fs[3], 10, 64)
		if err1 == nil && err2 == nil {
			out[fs[0]] += active * size
		}
	}
	return out
}

func (s slabs) total() int64 {
	var sum int64
	for _, v := range s {
		sum += v
	}
	return sum
}

// grownBy lists the caches that grew from before to s by more than
// minBytes, largest first, with their growth per socket.
func (s slabs) grownBy(before slabs, sockets int, minBytes int64) string {
	type g struct {
		name string
		d    int64
	}
	var gs []g
	for name, v := range s {
		if d := v - before[name]; d > minBytes {
			gs = append(gs, g{name, d})
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].d > gs[j].d })
	var parts []string
	for _, x := range gs {
		parts = append(parts, fmt.Sprintf("%s %.0f B", x.name, float64(x.d)/float64(sockets)))
	}
	return strings.Join(parts, ", ")
}

// settledSlabs reads the slab caches until their total moves by less than
// 1% of the growth from base between two reads half a second apart
// (sockets freed after a close go back through RCU and a deferred fput).
func settledSlabs(base int64) slabs {
	prev := readSlabs()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		cur := readSlabs()
		d, grown := cur.total()-prev.total(), max(prev.total()-base, 1<<20)
		if d < grown/100 && -d < grown/100 {
			return cur
		}
		prev = cur
	}
	return prev
}

// kernelShare measures the kernel's slab memory that sockets idle
// sockets held between a node and this process (conns) cost: before is
// read before they opened, open with them open. both is all of it, both
// ends of every connection (a loopback connection's two sockets live in
// the same kernel). node is the node's half (nodeKernelShare). Both in
// bytes per socket; ok is false where /proc/slabinfo cannot be read.
func kernelShare(b testing.TB, before, open slabs, sockets int, conns *idleConns, kill func()) (node, both float64, ok bool) {
	if before == nil || open == nil {
		b.Log("kernel share: /proc/slabinfo is not readable (it needs root); not measured")
		return 0, 0, false
	}
	both = float64(open.total()-before.total()) / float64(sockets)
	b.Logf("kernel, both ends, per socket: %s", open.grownBy(before, sockets, int64(sockets)*8))
	node, _ = nodeKernelShare(b, before.total(), open, sockets, conns, kill)
	b.Logf("kernel: %.0f B a socket both ends, %.0f B the node's", both, node)
	return node, both, true
}

// nodeKernelShare measures the node's half of the kernel's slab memory
// per socket of its sockets held by this process (conns), open read with
// them open, base the slabs' total before them (settledSlabs' tolerance).
// kill ends the node (it must not return before the process is gone),
// which leaves this process's halves open in CLOSE_WAIT; once they have
// read the node's FIN (an unread FIN holds a buffer on the socket) the
// caches that shrank are what went with the node. That leaves out the
// timewait sockets the node's closes left (a cost of closing, not of an
// idle socket), and it includes the node's own kernel objects (threads,
// mappings, its epoll instance, its Redis connections, its warm-up
// sockets) spread over the sockets: an upper bound, by well under 0.1 KiB
// a socket at 10,000. Other processes' sockets may stay open meanwhile:
// only what shrank counts. In bytes; ok is false where /proc/slabinfo
// cannot be read.
func nodeKernelShare(b testing.TB, base int64, open slabs, sockets int, conns *idleConns, kill func()) (float64, bool) {
	if open == nil {
		b.Log("kernel share: /proc/slabinfo is not readable (it needs root); not measured")
		return 0, false
	}
	if conns.stop != nil {
		conns.stop()
	}
	kill()
	conns.drain()
	after := settledSlabs(base)
	var went int64
	for name, v := range open {
		if d := v - after[name]; d > 0 {
			went += d
		}
	}
	b.Logf("kernel, the node's, per socket: %s", open.grownBy(after, sockets, int64(sockets)*8))
	b.Logf("kernel, grown after the node ended (not counted), per socket: %s", after.grownBy(open, sockets, int64(sockets)*8))
	return float64(went) / float64(sockets), true
}

// goMemory is a Go process's memory by use, in bytes, from its /metrics
// (the Prometheus Go collector's go_memstats_*): heap in use, goroutine
// stacks, and the runtime's own (spans, caches, GC metadata, the rest).
type goMemory struct{ heap, stack, runtime float64 }

// readGoMemory reads the memory of the Go process serving admin after a
// garbage collection (its heap profile's ?gc=1), so the heap in use is
// what is live, not what the last cycle left.
func readGoMemory(admin string) goMemory {
	if resp, err := http.Get("http://" + admin + "/debug/pprof/heap?gc=1"); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	m := func(name string) float64 { return metric(admin, "go_memstats_"+name) }
	return goMemory{
		heap:  m("heap_inuse_bytes"),
		stack: m("stack_inuse_bytes"),
		runtime: m("mspan_inuse_bytes") + m("mcache_inuse_bytes") + m("gc_sys_bytes") +
			m("other_sys_bytes") + m("buck_hash_sys_bytes"),
	}
}
