package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"

	"github.com/headcount/headcount/internal/redistest"
)

// hookReceiver is the app's webhook endpoint: it validates every request
// with pusher-http-go v5.1.1, fails the first failFirst attempts at each
// event, and keeps every request for the Node SDK's check.
type hookReceiver struct {
	*httptest.Server
	failFirst int
	mu        sync.Mutex
	tries     map[string]int
	got       []string
	invalid   []string
	raw       []map[string]any
}

func newHookReceiver(t *testing.T, failFirst int) *hookReceiver {
	r := &hookReceiver{failFirst: failFirst, tries: map[string]int{}}
	client := &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.raw = append(r.raw, map[string]any{"body": string(body), "headers": map[string]string{
			"content-type": req.Header.Get("Content-Type"), "x-pusher-key": req.Header.Get("X-Pusher-Key"),
			"x-pusher-signature": req.Header.Get("X-Pusher-Signature")}})
		hook, err := client.Webhook(req.Header, body)
		if err != nil || len(hook.Events) != 1 {
			r.invalid = append(r.invalid, fmt.Sprintf("%s: %v", body, err))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		e := hook.Events[0]
		line := strings.TrimSpace(strings.Join([]string{e.Name, e.Channel, e.UserID, e.Event, e.Data}, " "))
		if r.tries[line]++; r.tries[line] <= r.failFirst {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.tries[line] == r.failFirst+1 {
			r.got = append(r.got, line)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

// waitFor waits until every line in want was received (each once at least).
func (r *hookReceiver) waitFor(t *testing.T, timeout time.Duration, want ...string) {
	t.Helper()
	waitForLines(t, timeout, want, func() ([]string, []string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.Clone(r.got), slices.Clone(r.invalid)
	})
}

// checkWithNodeSDK has the Node SDK validate every raw request
// (test/compat/webhook-check.js), failing the test if it refuses one, and
// returns what it printed.
func checkWithNodeSDK(t *testing.T, raw []map[string]any) string {
	t.Helper()
	var in bytes.Buffer
	for _, r := range raw {
		line, _ := json.Marshal(r)
		in.Write(append(line, '\n'))
	}
	cmd := exec.Command("node", "webhook-check.js", e2eAppID, e2eAppKey, e2eAppSecret)
	cmd.Dir = filepath.Join(repoRoot(t), "test", "compat")
	cmd.Stdin = &in
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the Node SDK refused webhook requests: %v\n%s", err, out)
	}
	return string(out)
}

// startHookCluster starts, on a Redis of its own, two wsnodes, a cleaner
// and an httpapi serving appsFile, and waits for them.
func startHookCluster(t *testing.T, appsFile string) (a, b node) {
	t.Helper()
	srv := redistest.New(t)
	common := []string{"--redis", srv.URL(), "--apps-file", appsFile}
	a, b = startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	cl := startCleaner(t, "cleaner", common...)
	startHTTPAPIs(t, 1, common...)
	for _, n := range []node{a, b, cl} {
		waitReady(t, n.p, n.admin)
	}
	return a, b
}

// waitForLines polls read until every line in want is among those it
// returns, failing at once on an invalid request, and returns the lines.
func waitForLines(t *testing.T, timeout time.Duration, want []string, read func() (got, invalid []string)) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, invalid := read()
		if len(invalid) > 0 {
			t.Fatalf("invalid webhook requests: %v", invalid)
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(got, w) })
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhooks missing after %v: %v; received: %v", timeout, missing, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWebhooks drives occupancy webhooks end to end on real processes: 2
// wsnodes, a cleaner, 2 httpapi replicas, and a receiver that fails the
// first 3 attempts at every event. Occupied/vacated and member
// added/removed come for real sockets on both nodes; a SIGKILLed node's
// channels and members it held alone are vacated/removed; the httpapi
// delivering is SIGKILLed mid-delivery and the other replica delivers the
// rest; a reload within the debounce sends nothing; every request passes
// pusher-http-go's and the Node SDK's validation.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	rcv := newHookReceiver(t, 3)
	appsFile := writeAppsFile(t, []map[string]any{{
		"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret, "enableClientMessages": true,
		"webhooks": []map[string]any{{"url": rcv.URL + "/pusher/webhooks",
			"event_types": []string{"channel_occupied", "channel_vacated", "member_added", "member_removed", "client_event"}}},
	}})
	srv := redistest.New(t)
	common := []string{"--redis", srv.URL(), "--apps-file", appsFile}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	cl := startCleaner(t, "cleaner", common...)
	apis := startHTTPAPIs(t, 2, common...)
	for _, n := range []node{a, b, cl} {
		waitReady(t, n.p, n.admin)
	}

	// Sockets on both nodes: news on A; presence-r with u1 on A and u2 on B;
	// only-b held by B alone.
	ca, ida := wsConnect(t, a.addr)
	wsSubscribe(t, ca, "", "news", "")
	wsSubscribe(t, ca, ida, "presence-r", `{"user_id":"u1"}`)
	cb, idb := wsConnect(t, b.addr)
	wsSubscribe(t, cb, idb, "presence-r", `{"user_id":"u2"}`)
	wsSubscribe(t, cb, "", "only-b", "")
	_ = cb
	rcv.waitFor(t, 30*time.Second, "channel_occupied news", "channel_occupied presence-r", "member_added presence-r u1",
		"member_added presence-r u2", "channel_occupied only-b")

	// A client event (data passed as a string).
	wsSend(t, ca, `{"event":"client-typing","channel":"presence-r","data":{"x":1}}`)
	rcv.waitFor(t, 30*time.Second, `client_event presence-r u1 client-typing {"x":1}`)

	// A reload within the debounce: leave news and come back at once.
	ca2, _ := wsConnect(t, a.addr)
	wsSubscribe(t, ca2, "", "reload", "")
	rcv.waitFor(t, 30*time.Second, "channel_occupied reload")
	_ = ca2.CloseNow()
	ca3, _ := wsConnect(t, a.addr)
	wsSubscribe(t, ca3, "", "reload", "")

	// B dies; while its leavers' events are being retried, the delivering
	// httpapi dies too.
	b.p.kill(t)
	deadline := time.Now().Add(20 * time.Second)
	var holder httpapiProc
	for holder.p == nil {
		for _, h := range apis {
			if metricSum(h.admin, "headcount_webhook_delivering") == 1 && metricSum(h.admin, "headcount_webhook_failed_total") > 0 {
				holder = h
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no httpapi replica reports delivering webhooks")
		}
		time.Sleep(20 * time.Millisecond)
	}
	holder.p.signal(syscall.SIGKILL)
	rcv.waitFor(t, 60*time.Second, "member_removed presence-r u2", "channel_vacated only-b")

	// A marker after the reload's debounce: by the time it arrives, a
	// vacated for reload would have been sent.
	cm, _ := wsConnect(t, a.addr)
	wsSubscribe(t, cm, "", "marker", "")
	rcv.waitFor(t, 60*time.Second, "channel_occupied marker")
	rcv.mu.Lock()
	got := slices.Clone(rcv.got)
	raw := slices.Clone(rcv.raw)
	rcv.mu.Unlock()
	if slices.Contains(got, "channel_vacated reload") {
		t.Fatalf("a reload within the debounce sent channel_vacated: %v", got)
	}
	if slices.Contains(got, "channel_vacated presence-r") || slices.Contains(got, "member_removed presence-r u1") {
		t.Fatalf("events for what the dead node did not hold alone: %v", got)
	}

	// Every request, retries included, as the Node SDK sees it.
	checkWithNodeSDK(t, raw)
	t.Logf("%d requests valid for pusher-http-go and the Node SDK; events: %v", len(raw), got)
}

// batchHookReceiver is a batching webhook's endpoint: it validates every
// request with pusher-http-go v5.1.1 whatever its number of events, fails
// the second one, and keeps every request for the Node SDK's check.
type batchHookReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests [][]string // events of each request answered 2xx, in arrival order
	failed   int
	invalid  []string
	raw      []map[string]any
	token    []string // X-Hook-Token of each request
}

func newBatchHookReceiver(t *testing.T) *batchHookReceiver {
	r := &batchHookReceiver{}
	client := &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.raw = append(r.raw, map[string]any{"body": string(body), "headers": map[string]string{
			"content-type": req.Header.Get("Content-Type"), "x-pusher-key": req.Header.Get("X-Pusher-Key"),
			"x-pusher-signature": req.Header.Get("X-Pusher-Signature")}})
		r.token = append(r.token, req.Header.Get("X-Hook-Token"))
		hook, err := client.Webhook(req.Header, body)
		if err != nil || len(hook.Events) == 0 {
			r.invalid = append(r.invalid, fmt.Sprintf("%s: %v", body, err))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if len(r.raw) == 2 {
			r.failed++
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var events []string
		for _, e := range hook.Events {
			events = append(events, strings.TrimSpace(strings.Join([]string{e.Name, e.Channel, e.UserID, e.Event, e.Data}, " ")))
		}
		r.requests = append(r.requests, events)
	}))
	t.Cleanup(r.Close)
	return r
}

// events returns every delivered event in arrival order once all of want
// are among them.
func (r *batchHookReceiver) waitFor(t *testing.T, timeout time.Duration, want ...string) []string {
	t.Helper()
	return waitForLines(t, timeout, want, func() ([]string, []string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		var got []string
		for _, rq := range r.requests {
			got = append(got, rq...)
		}
		return got, slices.Clone(r.invalid)
	})
}

// TestWebhooksBatched drives a batching webhook with headers and a filter
// on real processes (2 wsnodes, a cleaner, the httpapi): requests carry
// several events, at most the batch size; a socket's client events arrive
// in order across requests, one of which failed and was retried; the
// events of a SIGKILLed node's reap arrive in order too; only presence-
// channels' events come (the filter); every request carries the header
// and passes pusher-http-go's and the Node SDK's validation.
func TestWebhooksBatched(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	const batchSize = 4
	rcv := newBatchHookReceiver(t)
	appsFile := writeAppsFile(t, []map[string]any{{
		"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret, "enableClientMessages": true,
		"webhooks": []map[string]any{{"url": rcv.URL + "/pusher/webhooks",
			"event_types": []string{"channel_occupied", "channel_vacated", "member_added", "member_removed", "client_event"},
			"headers":     map[string]string{"X-Hook-Token": "t0ken"},
			"filter":      map[string]string{"channel_name_starts_with": "presence-"},
			"batch":       map[string]int{"size": batchSize, "maxWaitMs": 300}}},
	}})
	a, b := startHookCluster(t, appsFile)

	ca, ida := wsConnect(t, a.addr)
	wsSubscribe(t, ca, "", "news", "") // filtered out
	wsSubscribe(t, ca, ida, "presence-batch", `{"user_id":"u1"}`)
	cb, idb := wsConnect(t, b.addr)
	wsSubscribe(t, cb, idb, "presence-batch", `{"user_id":"u2"}`)
	wsSubscribe(t, cb, idb, "presence-bonly", `{"user_id":"u2"}`)
	var want []string
	for i := range 8 {
		wsSend(t, ca, fmt.Sprintf(`{"event":"client-n","channel":"presence-batch","data":{"n":%d}}`, i))
		want = append(want, fmt.Sprintf(`client_event presence-batch u1 client-n {"n":%d}`, i))
	}
	rcv.waitFor(t, 30*time.Second, append([]string{"channel_occupied presence-batch", "member_added presence-batch u1",
		"member_added presence-batch u2", "channel_occupied presence-bonly", "member_added presence-bonly u2"}, want...)...)

	b.p.kill(t)
	got := rcv.waitFor(t, 60*time.Second, "member_removed presence-batch u2", "member_removed presence-bonly u2", "channel_vacated presence-bonly")

	inOrder := func(seq ...string) {
		t.Helper()
		idx := make([]int, len(seq))
		for i, s := range seq {
			if idx[i] = slices.Index(got, s); idx[i] < 0 || slices.Index(got[idx[i]+1:], s) >= 0 {
				t.Fatalf("%q arrived %d times: %v", s, len(slices.DeleteFunc(slices.Clone(got), func(g string) bool { return g != s })), got)
			}
		}
		if !slices.IsSorted(idx) {
			t.Fatalf("out of order: want %v, received %v", seq, got)
		}
	}
	inOrder(want...)
	inOrder("channel_occupied presence-bonly", "member_added presence-bonly u2", "member_removed presence-bonly u2", "channel_vacated presence-bonly")
	inOrder("member_added presence-batch u2", "member_removed presence-batch u2")
	for _, g := range got {
		if strings.Contains(g, " news") {
			t.Fatalf("the filter let %q through", g)
		}
	}

	rcv.mu.Lock()
	requests, raw, tokens, failed := slices.Clone(rcv.requests), slices.Clone(rcv.raw), slices.Clone(rcv.token), rcv.failed
	rcv.mu.Unlock()
	several := 0
	for _, rq := range requests {
		if len(rq) > batchSize {
			t.Fatalf("a request of %d events, over the batch size %d: %v", len(rq), batchSize, rq)
		}
		if len(rq) > 1 {
			several++
		}
	}
	if several == 0 || failed != 1 {
		t.Fatalf("want requests of several events and one failed request; got %d failed, requests %v", failed, requests)
	}
	for i, tok := range tokens {
		if tok != "t0ken" {
			t.Fatalf("request %d carried X-Hook-Token %q", i, tok)
		}
	}

	// Every request, the failed one included, as the Node SDK sees it.
	out := checkWithNodeSDK(t, raw)
	if !strings.Contains(out, "ok client_event,client_event") {
		t.Fatalf("the Node SDK saw no request of several events:\n%s", out)
	}
	t.Logf("%d requests (%d of several events) valid for pusher-http-go and the Node SDK:\n%s\ndelivered: %q", len(raw), several, out, requests)
}
