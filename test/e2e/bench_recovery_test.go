package e2e

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/wsclient"
)

// BenchmarkRecovery measures, with the binaries' default timings
// (heartbeat 1 s, dead-after 3 s, scan interval 500 ms, lease TTL 3 s):
//   - sigkill: 30 wsnodes holding 1,000 subscribed sockets over 100
//     channels, each started fresh and SIGKILLed next to a live one
//     holding 1,000 on 50 of those channels; for each, the time until
//     the HTTP API (an httpapi process), read back to back, counts every
//     channel as the live node alone (recovery, in
//     bench_recovery_peer_test.go, which BenchmarkPeer shares): p50, p99
//     and max over the kills.
//   - sigkill-large: the same, 10 kills, with 50,000 sockets over 5,000
//     channels on each node killed, or as many as the open-file limit
//     allows, ten to a channel (its sockets metric says how many): the
//     counts read exact from the reap's first script, whatever the node
//     held.
//   - sigkill-large-unanchored: sigkill-large with --exit-anchor=false, so
//     the figure beside it shows what the anchor saves (package
//     exitorder's StartAnchor).
//   - sigstop: 10 nodes of 1,000 hung (SIGSTOP: no FIN, the watch and
//     Redis's connection stay open), which only the heartbeat's age tells:
//     dead-after and the next scan.
//   - lease-takeover: the active cleaner of two is SIGKILLed; the time
//     until the other reports itself active; three rounds on fresh
//     processes and their median.
//
// HC_RECOVERY_KILLS (30) sets the kills of sigkill; the others kill a
// third as many. Run it with (about 5 minutes on 2 cores):
//
//	go test -run '^$' -bench Recovery -benchtime 1x -timeout 40m ./test/e2e/
func BenchmarkRecovery(b *testing.B) {
	sizes := recoverySizes(b)
	measures := []struct {
		name string
		kind string
		recoverySize
		sig syscall.Signal
	}{
		{"sigkill", headcountServer, sizes[0], syscall.SIGKILL},
		{"sigkill-large", headcountServer, sizes[1], syscall.SIGKILL},
		// The same without the exit anchor, in the same run: the kernel
		// frees the node's memory before its connections close.
		{"sigkill-large-unanchored", headcountUnanchored, sizes[1], syscall.SIGKILL},
		{"sigstop", headcountServer, recoverySize{sockets: sizes[0].sockets, kills: sizes[1].kills}, syscall.SIGSTOP},
	}
	for _, m := range measures {
		b.Run(m.name, func(b *testing.B) {
			for _, x := range recoveryMetrics(recovery(b, m.kind, m.sockets, m.kills, m.sig), m.sockets) {
				b.ReportMetric(x.value, x.unit)
			}
		})
	}
	rounds(b, "lease-takeover", func(b *testing.B) time.Duration {
		srv := redistest.New(b)
		cleaners := []node{startDefault(b, "cleaner-a", "cleaner", "--redis", srv.URL()),
			startDefault(b, "cleaner-b", "cleaner", "--redis", srv.URL())}
		active := -1
		deadline := time.Now().Add(30 * time.Second)
		for active < 0 && time.Now().Before(deadline) {
			for i, c := range cleaners {
				if metric(c.admin, "headcount_cleaner_active") == 1 {
					active = i
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if active < 0 {
			b.Fatal("no cleaner became active")
		}
		cleaners[active].p.kill(b)
		killed := time.Now()
		other := cleaners[1-active]
		for metric(other.admin, "headcount_cleaner_active") != 1 {
			if time.Since(killed) > 30*time.Second {
				b.Fatal("the passive cleaner never took over")
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(killed)
	}, cmp.Compare, seconds("s-to-takeover"))
}

// rounds runs round three times as sub-benchmarks name/round=N, each on
// fresh processes and reported by report, then reports their median (by
// compare) as name/median: single runs on a shared VM vary by a quarter.
func rounds[T any](b *testing.B, name string, round func(*testing.B) T, compare func(x, y T) int, report func(*testing.B, T)) {
	b.Run(name, func(b *testing.B) {
		var results []T
		for i := range 3 {
			b.Run("round="+strconv.Itoa(i+1), func(b *testing.B) {
				r := round(b)
				report(b, r)
				results = append(results, r)
			})
		}
		if len(results) == 3 {
			b.Run("median", func(b *testing.B) {
				slices.SortFunc(results, compare)
				report(b, results[1])
			})
		}
	})
}

// seconds reports a duration in seconds as unit.
func seconds(unit string) func(*testing.B, time.Duration) {
	return func(b *testing.B, d time.Duration) { b.ReportMetric(d.Seconds(), unit) }
}

// startDefault starts a binary with its default timings (startWSNode and
// startCleaner shorten them for the tests), on free loopback addresses.
func startDefault(b *testing.B, name, bin string, args ...string) node {
	n := node{admin: freeAddr(b)}
	args = append(args, "--admin-addr", n.admin)
	if bin == "wsnode" {
		n.addr = freeAddr(b)
		args = append(args, "--addr", n.addr)
	}
	n.p = start(b, name, bin, args...)
	return n
}

// openSubscribed opens a socket subscribed to channel, closed when b ends.
func openSubscribed(b testing.TB, addr, channel string) {
	c, err := wsclient.Dial(addr, "/app/"+e2eAppKey+"?protocol=7")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	if _, err := c.Read(10 * time.Second); err != nil {
		b.Fatal(err)
	}
	if err := c.Send(`{"event":"pusher:subscribe","data":{"channel":"` + channel + `"}}`); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Read(10 * time.Second); err != nil {
		b.Fatal(err)
	}
}

// waitRedisCounts reads the app's counts as Store.Channels (GET /channels)
// reads them, a millisecond apart, until they are want: the figure is the
// system's, not a poll interval's.
func waitRedisCounts(b testing.TB, store *counts.Store, want map[string]int64, within time.Duration) {
	deadline := time.Now().Add(within)
	var got map[string]int64
	for time.Now().Before(deadline) {
		var err error
		if got, err = store.Channels(context.Background(), e2eAppID, ""); err == nil && maps.Equal(got, want) {
			return
		}
		time.Sleep(time.Millisecond) // between reads, not for a condition
	}
	b.Fatalf("counts not as expected within %v: got %d channels, want %d", within, len(got), len(want))
}
