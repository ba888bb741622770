package proctest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreePort returns a loopback TCP port that was free a moment ago, chosen
// below the kernel's ephemeral range. Outgoing connections take their
// local ports from that range: a port from it, freed and listened on again
// by a server a moment later, may meanwhile have become some test's client
// connection, and the server's start fails with "address already in use".
func FreePort(t testing.TB) int {
	t.Helper()
	if p, ok := FreePortIn(PortRange()); ok {
		return p
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if Reserve(p) {
			return p
		}
	}
	t.Fatal("no loopback port left that this process has not handed out")
	return 0
}

// PortRange is where FreePort looks: from 10000 up to the start of the
// ephemeral range (net.ipv4.ip_local_port_range; 32768 if unreadable).
func PortRange() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return 10000, hi
}

// FreePortIn tries random ports in [lo, hi) until one can be listened on
// and was not handed out before in this process.
func FreePortIn(lo, hi int) (int, bool) {
	if hi-lo < 1000 {
		return 0, false // too narrow a window to pick from at random
	}
	for range 100 {
		p := lo + rand.IntN(hi-lo)
		if !Reserve(p) {
			continue
		}
		if !Listenable(p) {
			continue // stays reserved: something else holds it
		}
		return p, true
	}
	return 0, false
}

// Reserve records p as handed out and reports whether it was not before.
// A port is free only until its server binds it: two servers of one test
// given the same port a moment apart (random picks meet about once per
// 20,000 pairs, and an e2e run makes thousands of pairs) left the second
// one failing with "address already in use".
func Reserve(p int) bool {
	reserved.Lock()
	defer reserved.Unlock()
	if reserved.ports[p] {
		return false
	}
	reserved.ports[p] = true
	return true
}

var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Listenable reports whether a loopback listener can bind p now.
func Listenable(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
