package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
)

// churn has sockets subscribe to and unsubscribe from channels, no
// credentials needed (public channels), until ctx ends; then closes them.
func churn(ctx context.Context, t *testing.T, addr, key string, sockets int, names []string) {
	t.Helper()
	var wg sync.WaitGroup
	for s := range sockets {
		c, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/"+key+"?protocol=7", nil)
		if err != nil {
			t.Errorf("dial: %v", err)
			return
		}
		c.SetReadLimit(1 << 20)
		wg.Go(func() { // drain what the node answers
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					return
				}
			}
		})
		wg.Go(func() {
			defer c.CloseNow()
			tick := time.NewTicker(5 * time.Millisecond) // 400 frames a second a socket
			defer tick.Stop()
			for i := s; ; i++ {
				ch := names[i%len(names)]
				for _, ev := range []string{"pusher:subscribe", "pusher:unsubscribe"} {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					if c.Write(context.Background(), websocket.MessageText, []byte(`{"event":"`+ev+`","data":{"channel":"`+ch+`"}}`)) != nil {
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestAnonymousChurnKeepsTheLogInBudget: anonymous sockets subscribing and
// unsubscribing a thousand public channels of 190-byte names, on two
// wsnodes, while the apps' webhook receiver is down. The log of an app
// with room takes the churn as markers (one per channel and kind pending)
// and ends exact once the receiver is back; the log of an app whose budget
// is too small never holds more than it, and its receiver is told how many
// events went missing.
func TestAnonymousChurnKeepsTheLogInBudget(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	duration := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("HC_CHURN_DURATION")); err == nil {
		duration = d
	}
	const channels = 1000
	names := make([]string, channels)
	for i := range names {
		names[i] = fmt.Sprintf("churn-%04d-%s", i, strings.Repeat("x", 179))
	}
	require190 := len(names[0])
	if require190 != 190 {
		t.Fatalf("names are %d bytes", require190)
	}

	// The receivers' addresses, where nothing listens yet.
	roomyAddr, tightAddr := freeAddr(t), freeAddr(t)
	hook := func(addr string) []map[string]any {
		return []map[string]any{{"url": "http://" + addr + "/hooks",
			"event_types": []string{"channel_occupied", "channel_vacated", "subscription_count", "events_dropped"}}}
	}
	roomy := map[string]any{"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret, "webhooks": hook(roomyAddr)}
	tight := map[string]any{"id": "tight", "key": "tight-key", "secret": "tight-secret", "webhooks": hook(tightAddr),
		"maxWebhookLogSizeInMb": 0.0625}
	srv := redistest.New(t)
	common := []string{"--redis", srv.URL(), "--apps-file", writeAppsFile(t, []map[string]any{roomy, tight})}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	api := startHTTPAPIs(t, 1, common...)[0]
	for _, n := range []node{a, b} {
		waitReady(t, n.p, n.admin)
	}
	rdb := srv.Client(t)
	logs := map[string]eventlog.Log{e2eAppID: eventlog.For(keyspace.Space{}, e2eAppID), "tight": eventlog.For(keyspace.Space{}, "tight")}
	const tightBudget = 64 << 10 // 0.0625 MiB

	// The churn, with the receiver down; the logs' sizes sampled.
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range []node{a, b} {
		for _, key := range []string{e2eAppKey, "tight-key"} {
			wg.Go(func() { churn(ctx, t, n.addr, key, 2, names) })
		}
	}
	peak := map[string]int64{}
	for sampling := true; sampling; {
		select {
		case <-ctx.Done():
			sampling = false
		case <-time.After(100 * time.Millisecond):
		}
		for app, log := range logs {
			st, err := log.Stats(context.Background(), rdb)
			if err != nil {
				t.Fatal(err)
			}
			peak[app] = max(peak[app], st.Bytes)
		}
	}
	wg.Wait()
	if peak["tight"] > tightBudget {
		t.Fatalf("the tight app's log reached %d bytes, over its budget of %d", peak["tight"], tightBudget)
	}
	// A marker per channel and kind: the occupied being retried, a count
	// and a vacated pending behind it; about 260 bytes each.
	if most := int64(channels * 3 * 300); peak[e2eAppID] > most {
		t.Fatalf("the roomy app's log reached %d bytes under churn; markers should hold it under %d", peak[e2eAppID], most)
	}
	tightStats, err := logs["tight"].Stats(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	if tightStats.Dropped == 0 {
		t.Fatalf("the tight app dropped nothing: the test did not fill its log (peak %d)", peak["tight"])
	}
	used, _ := rdb.InfoMap(context.Background(), "memory").Result()
	t.Logf("peak log bytes: roomy %d, tight %d (budget %d); tight dropped %d; Redis used_memory %s",
		peak[e2eAppID], peak["tight"], tightBudget, tightStats.Dropped, used["Memory"]["used_memory_human"])

	// The receivers come back: the roomy app's channels all end vacated
	// for its receiver; the tight app's receiver is told of the drops.
	listen := func(addr string) net.Listener {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on a receiver's address: %v", err)
		}
		return lis
	}
	roomyRcv := newCountReceiverOn(t, listen(roomyAddr), e2eAppID, e2eAppKey, e2eAppSecret)
	tightRcv := newCountReceiverOn(t, listen(tightAddr), "tight", "tight-key", "tight-secret")
	deadline := time.Now().Add(90 * time.Second)
	for {
		tightRcv.mu.Lock()
		told := tightRcv.seq[""]
		tightRcv.mu.Unlock()
		roomyRcv.mu.Lock()
		var wrong []string
		for _, name := range names {
			if seq := roomyRcv.seq[name]; len(seq) > 0 && seq[len(seq)-1] != "vacated" {
				wrong = append(wrong, fmt.Sprintf("%s...: %v", name[:10], seq))
			}
		}
		invalid := append(roomyRcv.invalid, tightRcv.invalid...)
		roomyRcv.mu.Unlock()
		if len(invalid) > 0 {
			t.Fatalf("invalid webhook requests: %v", invalid)
		}
		st, err := logs[e2eAppID].Stats(context.Background(), rdb)
		if err == nil && len(told) > 0 && len(wrong) == 0 && metricSum(api.admin, "headcount_webhook_queue_depth") == 0 {
			t.Logf("after the churn: the roomy log holds %d bytes; the tight app's receiver got %v", st.Bytes, told)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the churn: events_dropped notices %v; roomy log bytes %d; channels not ending vacated: %v", told, st.Bytes, wrong)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
