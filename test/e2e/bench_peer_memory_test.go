package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
)

// idleSettle is how long a server is left idle after it last grew before
// its RSS may count as settled (HC_PEER_SETTLE, in seconds; default 130):
// longer than either runtime's idle collection. Go forces a GC two minutes
// after the last one and its scavenger then returns freed pages in the
// background; V8 runs its idle-time GCs after seconds without work. A
// smaller value is a quick check of the measure, not a figure.
func idleSettle() time.Duration {
	return time.Duration(envInt("HC_PEER_SETTLE", 130)) * time.Second
}

// idleHold is how long the RSS must then stay within idleTolerance:
// 20 s, or the whole settle time when that is shorter.
func idleHold() time.Duration { return min(20*time.Second, idleSettle()) }

// idleTolerance is how far apart the readings of a settled RSS may lie:
// 0.5% of it, and at least 256 KiB (a few of the Go scavenger's chunks).
func idleTolerance(rss int64) int64 { return max(rss/200, 256<<10) }

// idleServer is one server of peerIdleMemory: its cluster, the sockets
// this process holds to it, and its settled RSS at each size.
type idleServer struct {
	kind  string
	c     cluster
	conns *idleConns
	pid   int
	sizes []int     // sockets opened, beyond the warm-up ones
	rss   []int64   // settled RSS at each size, bytes
	heap  []float64 // Go heap in use at each size (headcount), bytes
}

// peerIdleMemory is BenchmarkPeer's idle-memory: each server (headcount on
// both transports, soketi) is one process, all three running at once so
// that their waits overlap, grown through three sizes up to a third each
// of what this process's open-file limit holds (it holds one descriptor
// per socket, HC_PEER_IDLE_SOCKETS, default 20,000, per server at most),
// each socket subscribed to one of 100 channels. At each size, once the
// HTTP API counts every socket, the RSS is read when settled, alike for
// both runtimes: idleSettle after the last socket opened, once readings a
// second apart have stayed within idleTolerance for idleHold (or as it
// stands 120 s later, said in the log). It reports per server the least
// squares slope of RSS over sockets (KiB/socket), its intercept
// (intercept-MiB), the RSS at each size (MiB@<sockets>), for headcount the
// slope of the Go heap in use (go-heap-KiB/socket, from /metrics, no GC
// forced), and the node's half of the kernel's slab memory per socket at
// the last size (kernel-KiB/socket; kernelShare, as root). The log has, per
// wait, what the RSS did (for headcount also the GC cycles the wait saw and
// the heap released to the OS). About 10 minutes.
func peerIdleMemory(b *testing.B) {
	b.Run("idle-memory", func(b *testing.B) {
		b.StopTimer()
		kinds := []string{headcountServer, headcountGoroutine, peerServer}
		fit := proctest.RaiseFileLimit(b, len(kinds)*envInt("HC_PEER_IDLE_SOCKETS", 20000))
		top := fit / len(kinds) / 300 * 300 // three sizes in whole hundreds
		if top < 300 {
			b.Fatalf("the open-file limit holds %d sockets: too few for three sizes", fit)
		}
		sizes := []int{top / 3, top * 2 / 3, top}
		b.Logf("idle-memory: sizes %v per server, settled after %v idle and %v within tolerance", sizes, idleSettle(), idleHold())

		servers := make([]*idleServer, len(kinds))
		for i, kind := range kinds {
			s := &idleServer{kind: kind, c: startCluster(b, kind, 1), conns: &idleConns{}}
			defer s.conns.close()
			s.conns.keepAlive(b)
			s.pid = s.c.nodes[0].cmd.Process.Pid
			openIdle(b, s.c.ws[0], 100, s.conns) // warm the pools and the Redis connections
			waitAPICount(b, s.c.api, "idle-", 100, int64(s.conns.len()))
			servers[i] = s
		}
		slabBase := readSlabs()
		for _, size := range sizes {
			grown := make([]time.Time, len(servers))
			before := make([]waitGo, len(servers))
			for i, s := range servers {
				openIdle(b, s.c.ws[0], size-(s.conns.len()-100), s.conns)
				waitAPICount(b, s.c.api, "idle-", 100, int64(s.conns.len()))
				grown[i], before[i] = time.Now(), s.readGo()
			}
			rss := settleAll(b, servers, grown)
			for i, s := range servers {
				after := s.readGo()
				s.sizes, s.rss, s.heap = append(s.sizes, size), append(s.rss, rss[i]), append(s.heap, after.heap)
				if s.c.admin != nil {
					b.Logf("%s at %d: %.0f GC cycles in the wait, heap in use %.1f -> %.1f MiB, released to the OS %.1f -> %.1f MiB",
						s.kind, size, after.cycles-before[i].cycles, before[i].heap/(1<<20), after.heap/(1<<20),
						before[i].released/(1<<20), after.released/(1<<20))
					if after.cycles == before[i].cycles && idleSettle() > 2*time.Minute {
						b.Errorf("%s at %d: no GC in %v of idleness", s.kind, size, idleSettle())
					}
				}
			}
		}

		results := make([][]peerMetric, len(servers))
		open := readSlabs()
		for i, s := range servers {
			xs := make([]float64, len(s.sizes))
			ys := make([]float64, len(s.sizes))
			for j := range s.sizes {
				xs[j], ys[j] = float64(s.sizes[j]), float64(s.rss[j])
			}
			slope, intercept := leastSquares(xs, ys)
			m := []peerMetric{{"KiB/socket", slope / 1024}, {"intercept-MiB", intercept / (1 << 20)}}
			for j, size := range s.sizes {
				// Zero-padded: go test orders a line's units by name.
				m = append(m, peerMetric{fmt.Sprintf("MiB@%0*d", len(strconv.Itoa(top)), size), ys[j] / (1 << 20)})
			}
			if s.c.admin != nil {
				heapSlope, _ := leastSquares(xs, s.heap)
				m = append(m, peerMetric{"go-heap-KiB/socket", heapSlope / 1024})
			}
			b.Logf("%s: %.3f KiB/socket settled, intercept %.1f MiB, RSS %s", s.kind, slope/1024, intercept/(1<<20), mibs(s.sizes, s.rss))
			// Each node in turn: what went with it is its half. The
			// others' sockets stay open and idle meanwhile.
			if kernel, ok := nodeKernelShare(b, slabBase.total(), open, top, s.conns, func() { s.c.nodes[0].kill(b) }); ok {
				m = append(m, peerMetric{"kernel-KiB/socket", kernel / 1024})
				open = readSlabs()
			}
			results[i] = append(m, peerMetric{"sockets", float64(top)})
		}
		for i, s := range servers {
			b.Run(s.kind, func(b *testing.B) {
				for _, x := range results[i] {
					b.ReportMetric(x.value, x.unit)
				}
			})
		}
	})
}

// waitGo is what a headcount node's /metrics says of its Go runtime
// (zero for soketi): GC cycles so far, heap in use and heap released.
type waitGo struct{ cycles, heap, released float64 }

func (s *idleServer) readGo() waitGo {
	if s.c.admin == nil {
		return waitGo{}
	}
	a := s.c.admin[0]
	return waitGo{metric(a, "go_gc_duration_seconds_count"), metric(a, "go_memstats_heap_inuse_bytes"),
		metric(a, "go_memstats_heap_released_bytes")}
}

// settleAll reads each server's RSS every second until it is settled
// (idleSettle after grown[i], then idleHold within idleTolerance) or
// 120 s past that, and returns the last reading of each. It logs what
// each RSS did in the wait.
func settleAll(b *testing.B, servers []*idleServer, grown []time.Time) []int64 {
	type reading struct {
		at  time.Time
		rss int64
	}
	seen := make([][]reading, len(servers))
	done := make([]bool, len(servers))
	out := make([]int64, len(servers))
	for left := len(servers); left > 0; {
		for i, s := range servers {
			if done[i] {
				continue
			}
			now := time.Now()
			seen[i] = append(seen[i], reading{now, proctest.RSS(b, s.pid)})
			idle := now.Sub(grown[i])
			if idle < idleSettle() {
				continue
			}
			lo, hi := seen[i][len(seen[i])-1].rss, seen[i][len(seen[i])-1].rss
			covered := false
			for j := len(seen[i]) - 1; j >= 0; j-- {
				lo, hi = min(lo, seen[i][j].rss), max(hi, seen[i][j].rss)
				if now.Sub(seen[i][j].at) >= idleHold() {
					covered = true
					break
				}
			}
			settled := covered && hi-lo <= idleTolerance(hi)
			if !settled && idle < idleSettle()+120*time.Second {
				continue
			}
			first, last := seen[i][0].rss, seen[i][len(seen[i])-1].rss
			lo, hi = first, first
			for _, r := range seen[i] {
				lo, hi = min(lo, r.rss), max(hi, r.rss)
			}
			state := "settled"
			if !settled {
				state = "NOT settled (last reading taken)"
			}
			b.Logf("%s at %d sockets: %s after %.0f s idle; RSS %.1f MiB when grown, %.1f-%.1f MiB in the wait, %.1f MiB at the end",
				s.kind, s.conns.len()-100, state, idle.Seconds(), inMiB(first), inMiB(lo), inMiB(hi), inMiB(last))
			out[i], done[i] = last, true
			left--
		}
		if left > 0 {
			time.Sleep(time.Second) // the reading interval, not a wait for a condition
		}
	}
	return out
}

// leastSquares fits y = slope*x + intercept.
func leastSquares(xs, ys []float64) (slope, intercept float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	slope = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	return slope, (sy - slope*sx) / n
}

func inMiB(v int64) float64 { return float64(v) / mib }

func mibs(sizes []int, rss []int64) string {
	out := ""
	for i := range sizes {
		out += fmt.Sprintf("%d: %.1f MiB; ", sizes[i], inMiB(rss[i]))
	}
	return out
}

func TestLeastSquares(t *testing.T) {
	// Points off the line y = 2x + 10 by +1, -2, +1: the residuals sum to
	// zero and do not tilt it, so the fit is the line itself.
	slope, intercept := leastSquares([]float64{1, 2, 3}, []float64{13, 12, 17})
	if slope != 2 || intercept != 10 {
		t.Fatalf("fit %v x + %v, want 2 x + 10", slope, intercept)
	}
}
