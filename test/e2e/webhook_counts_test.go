package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	pusher "github.com/pusher/pusher-http-go/v5"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
)

// countReceiver is a webhook endpoint that keeps, per channel, the events
// it got in order: "occupied", "vacated" and "count N".
type countReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	seq     map[string][]string
	last    time.Time
	invalid []string
}

func newCountReceiver(t *testing.T) *countReceiver {
	return newCountReceiverOn(t, nil, e2eAppID, e2eAppKey, e2eAppSecret)
}

// newCountReceiverOn is newCountReceiver for an app of its own, on lis
// (nil: a new loopback port).
func newCountReceiverOn(t *testing.T, lis net.Listener, app, key, secret string) *countReceiver {
	r := &countReceiver{seq: map[string][]string{}}
	client := &pusher.Client{AppID: app, Key: key, Secret: secret}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		var raw struct {
			Events []struct {
				Name              string `json:"name"`
				Channel           string `json:"channel"`
				SubscriptionCount *int64 `json:"subscription_count"`
			} `json:"events"`
		}
		if _, err := client.Webhook(req.Header, body); err != nil || json.Unmarshal(body, &raw) != nil {
			r.invalid = append(r.invalid, fmt.Sprintf("%s: %v", body, err))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, e := range raw.Events {
			what := strings.TrimPrefix(e.Name, "channel_")
			if e.SubscriptionCount != nil {
				what = fmt.Sprint("count ", *e.SubscriptionCount)
			}
			r.seq[e.Channel] = append(r.seq[e.Channel], what)
		}
		r.last = time.Now()
	}))
	if lis != nil {
		r.Listener.Close()
		r.Listener = lis
	}
	r.Start()
	t.Cleanup(r.Close)
	return r
}

// check reports what is wrong with the events of channel, whose count in
// Redis is now n: after a vacated, nothing but an occupied; occupied and
// vacated alternate, from occupied; the last event says n (the count, or
// vacated for 0).
func (r *countReceiver) check(channel string, n int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq := r.seq[channel]
	occupied := false
	for i, what := range seq {
		switch {
		case what == "occupied" && occupied, what == "vacated" && !occupied:
			return fmt.Sprintf("%s at %d of %v", what, i, seq)
		case what == "occupied", what == "vacated":
			occupied = what == "occupied"
		case !occupied:
			return fmt.Sprintf("%s after vacated at %d of %v", what, i, seq)
		}
	}
	want := "vacated"
	if n > 0 {
		want = fmt.Sprint("count ", n)
	}
	if len(seq) == 0 || seq[len(seq)-1] != want {
		return fmt.Sprintf("last is not %q: %v", want, seq)
	}
	return ""
}

// TestWebhookCountsAreRedis: subscribers of 20 channels spread over two
// wsnodes leave at once, each node's flush logging what it changed. Once
// the changes stop, the last subscription_count webhook of every channel
// still occupied is its count in Redis, a vacated channel's last event is
// its channel_vacated, and nothing about a channel follows its
// channel_vacated until it is occupied again.
func TestWebhookCountsAreRedis(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	rcv := newCountReceiver(t)
	appsFile := writeAppsFile(t, []map[string]any{{
		"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret,
		"webhooks": []map[string]any{{"url": rcv.URL + "/hooks",
			"event_types": []string{"channel_occupied", "channel_vacated", "subscription_count"}}},
	}})
	srv := redistest.New(t)
	common := []string{"--redis", srv.URL(), "--apps-file", appsFile}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	startHTTPAPIs(t, 1, common...)
	for _, n := range []node{a, b} {
		waitReady(t, n.p, n.admin)
	}
	store := counts.NewStore(srv.Client(t), keyspace.Space{})

	const channels, each, stay = 20, 16, 2
	var leave []*websocket.Conn
	for i := range channels {
		ch := fmt.Sprint("c-", i)
		for j := range each {
			c, _ := wsConnect(t, []node{a, b}[j%2].addr)
			wsSubscribe(t, c, "", ch, "")
			// Even channels keep two subscribers, one per node; odd ones
			// are vacated.
			if i%2 == 1 || j >= stay {
				leave = append(leave, c)
			}
		}
	}
	var wg sync.WaitGroup
	for _, c := range leave {
		wg.Go(func() { _ = c.CloseNow() })
	}
	wg.Wait()

	want := func(i int) int64 {
		if i%2 == 1 {
			return 0
		}
		return stay
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var wrong []string
		for i := range channels {
			ch := fmt.Sprint("c-", i)
			n, err := store.Channel(context.Background(), e2eAppID, ch)
			if err != nil || n != want(i) {
				wrong = append(wrong, fmt.Sprintf("%s: Redis has %d, want %d (%v)", ch, n, want(i), err))
				continue
			}
			if msg := rcv.check(ch, n); msg != "" {
				wrong = append(wrong, ch+": "+msg)
			}
		}
		rcv.mu.Lock()
		quiet, invalid := time.Since(rcv.last) > time.Second, slices.Clone(rcv.invalid)
		rcv.mu.Unlock()
		if len(invalid) > 0 {
			t.Fatalf("invalid webhook requests: %v", invalid)
		}
		if len(wrong) == 0 && quiet {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("once the changes stopped, webhooks disagree with Redis:\n%s", strings.Join(wrong, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
