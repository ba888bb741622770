package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"

	"github.com/headcount/headcount/pkg/redisx/redistest"
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
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		got, invalid := slices.Clone(r.got), slices.Clone(r.invalid)
		r.mu.Unlock()
		if len(invalid) > 0 {
			t.Fatalf("invalid webhook requests: %v", invalid)
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(got, w) })
		if len(missing) == 0 {
			return
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
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	rcv := newHookReceiver(t, 3)
	appsJSON, _ := json.Marshal([]map[string]any{{
		"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret, "enableClientMessages": true,
		"webhooks": []map[string]any{{"url": rcv.URL + "/pusher/webhooks",
			"event_types": []string{"channel_occupied", "channel_vacated", "member_added", "member_removed", "client_event"}}},
	}})
	appsFile := filepath.Join(t.TempDir(), "apps.json")
	if err := os.WriteFile(appsFile, appsJSON, 0o600); err != nil {
		t.Fatal(err)
	}
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
	t.Logf("%d requests valid for pusher-http-go and the Node SDK; events: %v", len(raw), got)
}
