package counts

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/redisx/redistest"
)

// TestScriptTimeLargeNode measures, with Redis's own SLOWLOG, the longest
// single command of a republish, an audit and a reap of one node holding
// HEADCOUNT_LARGE_NODE subscriptions (one per channel) in one app, beside
// a small node, and how long another node's heartbeats wait meanwhile. It is a measurement, not a check: skipped unless the
// variable is set, e.g.
//
//	HEADCOUNT_LARGE_NODE=300000 go test -run TestScriptTimeLargeNode -v ./pkg/counts/
func TestScriptTimeLargeNode(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("HEADCOUNT_LARGE_NODE"))
	if n <= 0 {
		t.Skip("set HEADCOUNT_LARGE_NODE to the node's subscriptions")
	}
	ctx := context.Background()
	srv := redistest.New(t)
	// The default 3 s read timeout is shorter than one-script reaps of
	// large nodes.
	opts := *srv.Client(t).Options()
	opts.ReadTimeout = time.Minute
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { _ = rdb.Close() })
	admin := rdb
	// 50 µs, not 0: commands a script calls are logged too, and logging
	// each would slow the scripts measured.
	require.NoError(t, admin.ConfigSet(ctx, "slowlog-log-slower-than", "50").Err())
	require.NoError(t, admin.ConfigSet(ctx, "slowlog-max-len", "100000").Err())
	for _, s := range []*redis.Script{applyScript, reapScript, reapSliceScript, auditScript} {
		require.NoError(t, s.Load(ctx, rdb).Err())
	}

	var hb *Recorder // another node, heartbeating while each f runs
	// longest runs f and logs its longest script by SLOWLOG, and the
	// calls and Redis time of all its scripts by INFO commandstats.
	longest := func(what string, f func()) {
		t.Helper()
		require.NoError(t, admin.SlowLogReset(ctx).Err())
		require.NoError(t, admin.ConfigResetStat(ctx).Err())
		// Meanwhile another node heartbeats every 10 ms on a connection of
		// its own: how long its heartbeats wait behind the scripts.
		stop, beats := make(chan struct{}), make(chan []time.Duration)
		go func() {
			var lat []time.Duration
			for {
				select {
				case <-stop:
					beats <- lat
					return
				case <-time.After(10 * time.Millisecond):
				}
				t0 := time.Now()
				if err := hb.Heartbeat(ctx); err == nil {
					lat = append(lat, time.Since(t0))
				}
			}
		}()
		start := time.Now()
		f()
		wall := time.Since(start)
		close(stop)
		lat := <-beats
		slices.Sort(lat)
		hbAt := func(q float64) time.Duration {
			if len(lat) == 0 {
				return 0
			}
			return lat[int(q*float64(len(lat)-1))]
		}
		logs, err := admin.SlowLogGet(ctx, -1).Result()
		require.NoError(t, err)
		var ds []time.Duration
		var top redis.SlowLog
		var topAt int
		for i, l := range logs {
			if name := strings.ToLower(fmt.Sprint(l.Args[0])); name == "evalsha" || name == "eval" {
				ds = append(ds, l.Duration)
				if l.Duration > top.Duration {
					top, topAt = l, len(logs)-i
				}
			}
		}
		nargs := len(top.Args)
		if nargs > 14 {
			top.Args = top.Args[:14]
		}
		t.Logf("longest: command %d of %d logged: %q (%d arguments)", topAt, len(logs), top.Args, nargs)
		slices.Sort(ds)
		at := func(q float64) time.Duration {
			if len(ds) == 0 {
				return 0
			}
			return ds[int(q*float64(len(ds)-1))]
		}
		stats, err := admin.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		var calls, usec int64
		for _, line := range strings.Split(stats, "\r\n") {
			rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
			if !ok {
				rest, ok = strings.CutPrefix(line, "cmdstat_eval:")
			}
			if !ok {
				continue
			}
			for _, kv := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				x, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					calls += x
				case "usec":
					usec += x
				}
			}
		}
		t.Logf("%-24s longest script %10v (p99 %v, p50 %v of those over 50 µs)   scripts %6d   their Redis time %10v   wall %v   heartbeats %d: p99 %v, max %v",
			what, at(1), at(0.99), at(0.5), calls, time.Duration(usec)*time.Microsecond, wall, len(lat), hbAt(0.99), hbAt(1))
	}

	store := NewStore(rdb, testKeys.ks)
	if v, _ := strconv.Atoi(os.Getenv("HEADCOUNT_SLICE")); v > 0 {
		store.SliceSize = v
	}
	small := NewRecorder(rdb, "small", RecorderOptions{Heartbeat: time.Hour, Logger: hclog.NewNullLogger()})
	for i := range 1000 {
		small.Add("app", fmt.Sprintf("ch%d", i), 1)
	}
	require.NoError(t, small.Flush(ctx))
	hbClient := redis.NewClient(&opts)
	t.Cleanup(func() { _ = hbClient.Close() })
	hb = NewRecorder(hbClient, "heartbeat", RecorderOptions{Heartbeat: time.Hour, Logger: hclog.NewNullLogger()})
	hb.Add("app", "hb", 1)
	require.NoError(t, hb.Flush(ctx))
	big := NewRecorder(rdb, "big", RecorderOptions{Heartbeat: time.Hour, Logger: hclog.NewNullLogger()})
	for i := range n {
		big.Add("app", fmt.Sprintf("ch%d", i), 1)
	}
	longest("republish (first flush)", func() { require.NoError(t, big.Flush(ctx)) })
	longest("audit", func() {
		d, err := store.Audit(ctx, "app")
		require.NoError(t, err)
		require.False(t, d.Found())
	})
	longest("audit again", func() {
		d, err := store.Audit(ctx, "app")
		require.NoError(t, err)
		require.False(t, d.Found())
	})
	longest("reap", func() {
		ok, reaped, err := store.ReapNode(ctx, "app", "big", 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, n, reaped.Fields)
	})
}
