package e2e

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/internal/wstest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
)

// BenchmarkRecovery measures, with the binaries' default timings
// (heartbeat 1 s, dead-after 3 s, scan interval 500 ms, lease TTL 3 s),
// three rounds each on fresh processes and their median:
//   - sigkill: a wsnode holding 1,000 subscribed sockets over 100
//     channels is SIGKILLed next to a live one holding 1,000; the time
//     until the counts, read back to back as the HTTP API reads them,
//     equal the live node's sockets exactly.
//   - sigkill-large: the same with 50,000 sockets over 5,000 channels on
//     the node killed, or as many as the open-file limit allows, ten to a
//     channel (its sockets metric says how many).
//   - lease-takeover: the active cleaner of two is SIGKILLed; the time
//     until the other reports itself active.
//
// Run it with:
//
//	go test -run '^$' -bench Recovery -benchtime 1x ./test/e2e/
func BenchmarkRecovery(b *testing.B) {
	// A node as the other tests size it, and one of 50,000 sockets over
	// 5,000 channels (or as many as the open-file limit lets this process
	// and a wsnode hold, ten to a channel), whose reap takes dozens of
	// slices: the counts read exact from the reap's first script, whatever
	// the node held.
	fit := proctest.RaiseFileLimit(b, 50000+liveSockets)
	large := min(50000, fit*9/10-liveSockets) // a wsnode's --max-sockets is 90% of its limit
	for _, size := range []struct {
		name              string
		sockets, channels int
	}{{"sigkill", 1000, 100}, {"sigkill-large", large, large / 10}} {
		rounds(b, size.name, func(b *testing.B) time.Duration {
			b.ReportMetric(float64(size.sockets), "sockets")
			return sigkillToExact(b, size.sockets, size.channels)
		}, cmp.Compare, seconds("s-to-exact"))
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

// liveSockets is what the node left alive holds, on the victim's first
// channels.
const liveSockets = 1000

// sigkillToExact starts two cleaners and two wsnodes with their default
// timings, subscribes sockets over channels on the victim and liveSockets
// on the other, SIGKILLs the victim and returns the time until the counts,
// read as the HTTP API reads them, are the live node's alone.
func sigkillToExact(b *testing.B, sockets, channels int) time.Duration {
	srv := redistest.New(b)
	store := counts.NewStore(srv.Client(b), keyspace.Space{})
	for i := range 2 {
		c := startDefault(b, "cleaner-"+strconv.Itoa(i), "cleaner", "--redis", srv.URL())
		waitReady(b, c.p, c.admin)
	}
	victim := startDefault(b, "ws-victim", "wsnode", "--redis", srv.URL(), "--node-id", "victim")
	live := startDefault(b, "ws-live", "wsnode", "--redis", srv.URL(), "--node-id", "live")
	want, both := map[string]int64{}, map[string]int64{}
	for _, n := range []struct {
		node
		sockets int
	}{{victim, sockets}, {live, liveSockets}} {
		waitReady(b, n.p, n.admin)
		for i := range n.sockets {
			ch := "recovery-" + strconv.Itoa(i%channels)
			openSubscribed(b, n.addr, ch)
			both[ch]++
			if n.node == live {
				want[ch]++
			}
		}
	}
	waitRedisCounts(b, store, both, time.Minute)
	victim.p.kill(b)
	killed := time.Now()
	waitRedisCounts(b, store, want, time.Minute)
	return time.Since(killed)
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
	c, err := wstest.Dial(addr, "/app/"+e2eAppKey+"?protocol=7")
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
