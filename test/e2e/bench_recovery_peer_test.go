package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
)

// The recovery measure, shared by BenchmarkRecovery (headcount alone, and
// a hung node) and BenchmarkPeer (beside soketi): many kills in one run,
// each of a fresh node, so that p99 is over kills and not one kill's luck.

const (
	// liveSockets is what the node left alive holds, 20 to each of the
	// channels recovery-0..49: the victim's first channels, so some
	// channels lose sockets and the victim's others vanish.
	liveSockets, liveChannels = 1000, 50
	// recoveryWithin bounds one kill's wait for exact counts; a hung
	// node takes dead-after (3 s by default) and a scan.
	recoveryWithin = 30 * time.Second
)

// recoverySize is one size of victim and how many of it a run kills.
type recoverySize struct {
	suffix  string // of the measure's name: "" or "-large"
	sockets int
	kills   int
}

// recoverySizes are a node of 1,000 sockets, killed HC_RECOVERY_KILLS
// times (default 30), and one of 50,000, or as many as the open-file
// limit lets this process (which holds one end of every socket) and the
// node hold, killed a third as often. It raises this process's
// open-file limit, which the nodes inherit.
func recoverySizes(b *testing.B) []recoverySize {
	fit := proctest.RaiseFileLimit(b, 50000+liveSockets)
	large := min(50000, fit*9/10-liveSockets) // a wsnode's --max-sockets is 90% of its limit
	kills := envInt("HC_RECOVERY_KILLS", 30)
	return []recoverySize{{"", 1000, kills}, {"-large", large, max(1, kills/3)}}
}

// recoveryMetrics reports what recovery measured: the percentiles of the
// kills' times to exact counts, their worst, how many kills (p99 of 30 is
// the worst but one) and the victim's sockets.
func recoveryMetrics(times []time.Duration, sockets int) []peerMetric {
	return []peerMetric{
		{"p50-ms", ms(pct(times, 0.50))}, {"p99-ms", ms(pct(times, 0.99))}, {"max-ms", ms(slices.Max(times))},
		{"kills", float64(len(times))}, {"sockets", float64(sockets)},
	}
}

// recovery starts kind's cluster (startCluster: one live node, and for
// headcount its two cleaners with default timings and an httpapi) with
// liveSockets on the live node, then, kills times: starts a fresh victim
// node, subscribes sockets over sockets/10 channels on it, waits until the
// HTTP API counts them all, sends the victim sig and reads the HTTP API
// back to back until every channel's count is the live node's. It returns
// each kill's time from the signal to the first exact read's answer.
//
// For headcount it also waits, before each kill, until the active cleaner
// watches the victim's admin port: a deployed node lives long past its
// cleaner's next listing (every liveness interval, 100 ms by default),
// and one killed before it goes by the liveness check instead.
func recovery(b *testing.B, kind string, sockets, kills int, sig syscall.Signal) []time.Duration {
	c := startCluster(b, kind, 1)
	live := &idleConns{}
	defer live.close()
	live.keepAlive(b) // soketi closes a socket silent for 120 s
	openIdleOn(b, c.ws[0], liveSockets, live, func(i int) string { return "recovery-" + strconv.Itoa(i%liveChannels) })
	want := map[string]int64{}
	for i := range liveChannels {
		want["recovery-"+strconv.Itoa(i)] = liveSockets / liveChannels
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	channels := sockets / 10
	var times []time.Duration
	for k := range kills {
		victim := startNode(b, kind, c.srv, "v"+strconv.Itoa(k))
		conns := &idleConns{}
		openIdleOn(b, victim.addr, sockets, conns, func(i int) string { return "recovery-" + strconv.Itoa(i%channels) })
		waitAPICount(b, c.api, "recovery-", channels, int64(sockets+liveSockets))
		waitWatched(b, c.cleaners, 2)
		signalled := time.Now()
		victim.p.signal(sig)
		d, err := readExact(client, c.api, want, signalled)
		victim.p.kill(b) // a stopped node too, before its sockets close
		conns.close()
		if err != nil {
			b.Fatalf("kill %d of %d: %v", k+1, kills, err)
		}
		times = append(times, d)
	}
	b.Logf("%s, %d sockets: time to exact counts by kill: %v", kind, sockets, times)
	return times
}

// waitWatched waits until one of the cleaners (the active one) holds a
// watch on n nodes; it does nothing for no cleaners (soketi).
func waitWatched(b *testing.B, cleaners []string, n int) {
	if len(cleaners) == 0 {
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, admin := range cleaners {
			if metric(admin, "headcount_cleaner_watched_nodes") == float64(n) {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("no cleaner watches %d nodes", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readExact reads every occupied channel's subscription_count through the
// HTTP API at api, back to back from one client as a user reading
// continuously does (more readers only take the machine's cores from the
// servers), until an answer is want, and returns the time from since to
// that answer.
//
// The read is GET /apps/{id}/channels?order=subscription_count&limit=1000,
// one signed request that both servers answer with every channel's count
// (want's at most 1,000 channels): headcount's leaderboard (its listing,
// as Pusher's, answers 400 to info=subscription_count), soketi's listing,
// which ignores order and limit and always carries the counts.
func readExact(client *http.Client, api string, want map[string]int64, since time.Time) (time.Duration, error) {
	u := signedURL(api, "/apps/"+e2eAppID+"/channels", url.Values{"order": {"subscription_count"}, "limit": {"1000"}})
	ctx, cancel := context.WithTimeout(context.Background(), recoveryWithin)
	defer cancel()
	var lastGot map[string]int64
	var last error
	for ctx.Err() == nil {
		got, err := channelCounts(ctx, client, u)
		if err == nil && maps.Equal(got, want) {
			return time.Since(since), nil
		}
		lastGot, last = got, err
	}
	if last == nil { // formatted only now: printing a 1,000-channel answer takes milliseconds
		last = fmt.Errorf("%d channels, want %d: %v", len(lastGot), len(want), lastGot)
	}
	return 0, fmt.Errorf("counts not exact %v after the signal; last read: %w", recoveryWithin, last)
}

// channelCounts is one GET of u: each channel's subscription_count.
func channelCounts(ctx context.Context, client *http.Client, u string) (map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var ans struct {
		Channels map[string]struct {
			SubscriptionCount int64 `json:"subscription_count"`
		} `json:"channels"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(ans.Channels))
	for name, ch := range ans.Channels {
		out[name] = ch.SubscriptionCount
	}
	return out, nil
}

// peerRecovery is BenchmarkPeer's recovery: recovery on headcount and on
// soketi, for each of recoverySizes, as Peer/recovery<suffix>/<server>.
// The order alternates by size; each server's kills are one run on one
// cluster (no rounds: the kills are the samples).
func peerRecovery(b *testing.B) {
	for i, size := range recoverySizes(b) {
		kinds := []string{headcountServer, peerServer}
		if i%2 == 1 {
			slices.Reverse(kinds)
		}
		b.Run("recovery"+size.suffix, func(b *testing.B) {
			for _, kind := range kinds {
				b.Run(kind, func(b *testing.B) {
					b.StopTimer()
					for _, m := range recoveryMetrics(recovery(b, kind, size.sockets, size.kills, syscall.SIGKILL), size.sockets) {
						b.ReportMetric(m.value, m.unit)
					}
				})
			}
		})
	}
}
