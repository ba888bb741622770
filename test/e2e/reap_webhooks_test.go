package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	pusher "github.com/pusher/pusher-http-go/v5"
)

// eventRecorder is a webhook endpoint keeping each valid event as
// "name channel [user_id] [subscription_count]".
type eventRecorder struct {
	*httptest.Server
	mu      sync.Mutex
	got     []string
	invalid []string
}

func newEventRecorder(t *testing.T) *eventRecorder {
	r := &eventRecorder{}
	client := &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var hook struct {
			Events []struct {
				Name              string `json:"name"`
				Channel           string `json:"channel"`
				UserID            string `json:"user_id"`
				SubscriptionCount *int64 `json:"subscription_count"`
			} `json:"events"`
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, err := client.Webhook(req.Header, body); err != nil || json.Unmarshal(body, &hook) != nil {
			r.invalid = append(r.invalid, string(body))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, e := range hook.Events {
			line := []string{e.Name, e.Channel}
			if e.UserID != "" {
				line = append(line, e.UserID)
			}
			if e.SubscriptionCount != nil {
				line = append(line, strconv.FormatInt(*e.SubscriptionCount, 10))
			}
			r.got = append(r.got, strings.Join(line, " "))
		}
	}))
	t.Cleanup(r.Close)
	return r
}

// since returns the set of events received after the first from of them,
// with set p's channel names made generic (g-alone -> X-alone,
// presence-g -> presence-X), so two equivalent channel sets compare.
func (r *eventRecorder) since(t *testing.T, from int, p string) map[string]bool {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.invalid) > 0 {
		t.Fatalf("invalid webhook requests: %v", r.invalid)
	}
	out := map[string]bool{}
	for _, line := range r.got[from:] {
		f := strings.Fields(line)
		if rest, ok := strings.CutPrefix(f[1], p+"-"); ok {
			f[1] = "X-" + rest
		} else if f[1] == "presence-"+p {
			f[1] = "presence-X"
		}
		out[strings.Join(f, " ")] = true
	}
	return out
}

func (r *eventRecorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// waitSince waits until the events after from, renamed as since does,
// include every one of want, and returns them all.
func (r *eventRecorder) waitSince(t *testing.T, from int, p string, timeout time.Duration, want ...string) map[string]bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := r.since(t, from, p)
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return got[w] })
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhooks missing after %v: %v; received: %v", timeout, missing, slices.Sorted(mapKeys(got)))
		}
		time.Sleep(20 * time.Millisecond) // a poll interval
	}
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestReapSendsTheWebhooksOfALeave: a SIGKILLed node's channels produce
// the same webhooks as the same sockets leaving gracefully. Two wsnodes,
// a cleaner and an httpapi; the app's webhook asks for channel_vacated,
// member_removed and subscription_count. On node A a socket leaves
// gracefully from g-shared (which a witness socket on A keeps occupied),
// g-alone (which it held alone) and presence-g (as user "gone"; the
// witness stays as user "stay"). Node B, whose socket holds the equivalent
// k- channels, is SIGKILLed and reaped by the cleaner. The events each
// causes, by (name, channel, user_id, subscription_count), are the same
// set: the count of the channel left occupied, its vacated twin, the
// member who left.
func TestReapSendsTheWebhooksOfALeave(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	rcv := newEventRecorder(t)
	appsFile := writeAppsFile(t, []map[string]any{{
		"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret,
		"webhooks": []map[string]any{{"url": rcv.URL + "/pusher/webhooks",
			"event_types": []string{"channel_vacated", "member_removed", "subscription_count"}}},
	}})
	a, b := startHookCluster(t, appsFile)

	// The witness on A stays in both sets; each count settles before the
	// next subscribe, so every channel's setup events are known.
	w, idw := wsConnect(t, a.addr)
	leaver, idl := wsConnect(t, a.addr)
	victim, idv := wsConnect(t, b.addr)
	for _, s := range []struct {
		c        *websocket.Conn
		id, node string
	}{{leaver, idl, "g"}, {victim, idv, "k"}} {
		wsSubscribe(t, w, "", s.node+"-shared", "")
		wsSubscribe(t, w, idw, "presence-"+s.node, `{"user_id":"stay"}`)
		rcv.waitSince(t, 0, s.node, 20*time.Second, "subscription_count X-shared 1")
		wsSubscribe(t, s.c, "", s.node+"-shared", "")
		wsSubscribe(t, s.c, "", s.node+"-alone", "")
		wsSubscribe(t, s.c, s.id, "presence-"+s.node, `{"user_id":"gone"}`)
		rcv.waitSince(t, 0, s.node, 20*time.Second, "subscription_count X-shared 2", "subscription_count X-alone 1")
	}

	// A graceful leave on A. Its channel_vacated and member_removed wait
	// out the deliverer's debounce, so its counts have come by then.
	from := rcv.len()
	_ = leaver.Close(websocket.StatusNormalClosure, "")
	graceful := rcv.waitSince(t, from, "g", 30*time.Second,
		"subscription_count X-shared 1", "channel_vacated X-alone", "member_removed presence-X gone")

	// B dies with the equivalent sockets; the cleaner reaps it.
	from = rcv.len()
	b.p.kill(t)
	want := slices.Sorted(mapKeys(graceful))
	killed := rcv.waitSince(t, from, "k", 30*time.Second, want...)
	if got := slices.Sorted(mapKeys(killed)); !slices.Equal(got, want) {
		t.Fatalf("a reap's webhooks differ from a graceful leave's:\nleave: %v\nreap:  %v", want, got)
	}
	t.Logf("a graceful leave and a reap both sent %v", want)
}
