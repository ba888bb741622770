package webhook

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
)

// TestDelivererFollowsReloads: a running deliverer starts delivering to a
// webhook URL an app reload adds (from what the log still holds: here the
// event before it, not trimmed yet), and stops delivering to one it
// removes, without a restart.
func TestDelivererFollowsReloads(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	f := newFixture(t, rdb)
	_, reg := f.start(t, "r1", Options{})
	f.append(t, Event{Name: ChannelOccupied, Channel: "a"})
	f.rcv.waitFor(t, 1)
	removed := groupName(f.rcv.URL + "/hook")

	second := newReceiver(t, f.app)
	withSecond := *f.app
	withSecond.Webhooks = append([]apps.Webhook{{URL: second.URL + "/hook", EventTypes: allTypes}}, f.app.Webhooks...)
	next, err := apps.New([]*apps.App{&withSecond})
	require.NoError(t, err)
	f.reg.Replace(next)
	f.app = &withSecond
	f.append(t, Event{Name: ChannelOccupied, Channel: "b"})
	require.ElementsMatch(t, []string{"channel_occupied a", "channel_occupied b"}, second.waitFor(t, 2), "the URL added gets the log")
	require.ElementsMatch(t, []string{"channel_occupied a", "channel_occupied b"}, f.rcv.waitFor(t, 2))

	// The URL to be removed is being delivered by its target restarted on
	// the reloaded app, so its series going away below means that target
	// stopped (the added URL's target, started in the same pass, runs).
	delivering := func() float64 { return metricstest.Value(t, reg, "headcount_webhook_delivering", "webhook", removed) } // -1: no series
	require.Eventually(t, func() bool { return delivering() == 1 }, 10*time.Second, 5*time.Millisecond)
	onlySecond := withSecond
	onlySecond.Webhooks = withSecond.Webhooks[:1]
	next, err = apps.New([]*apps.App{&onlySecond})
	require.NoError(t, err)
	f.reg.Replace(next)
	f.app = &onlySecond
	// The reload is applied asynchronously: an event appended before the
	// removed URL's delivery has stopped may still reach it. Once the
	// deliverer has dropped its series, nothing more may.
	require.Eventually(t, func() bool { return delivering() == -1 }, 10*time.Second, 5*time.Millisecond,
		"the removed URL's delivery did not stop")
	f.append(t, Event{Name: ChannelOccupied, Channel: "c"})
	require.Contains(t, second.waitFor(t, 3), "channel_occupied c")
	// The removed URL's delivery stopped: nothing more reaches it.
	require.Never(t, func() bool {
		f.rcv.mu.Lock()
		defer f.rcv.mu.Unlock()
		return len(f.rcv.got) > 2
	}, 500*time.Millisecond, 50*time.Millisecond, "the URL removed got an event after its removal")
}

// TestAReloadResendsNothingDelivered: an app reloaded while one of its
// webhooks is being posted lets the post finish and acknowledges it, so
// the receiver gets the event once. It failed when the reload cancelled
// the post: the receiver had the event, the deliverer saw an error, and
// the restarted delivery sent it again.
func TestAReloadResendsNothingDelivered(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	f := newFixture(t, rdb)
	var (
		mu      sync.Mutex
		got     []string
		arrived = make(chan struct{}, 10)
		aborted = make(chan struct{}, 10)
		release = make(chan struct{})
	)
	slow := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var hook struct{ Events []Event }
		body, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(body, &hook))
		mu.Lock()
		for _, e := range hook.Events {
			got = append(got, e.Name+" "+e.Event)
		}
		mu.Unlock()
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			aborted <- struct{}{}
		}
	}))
	defer slow.Close()
	reload := func(secret string) {
		next := *f.app
		next.Secret = secret
		next.Webhooks = []apps.Webhook{{URL: slow.URL + "/hook", EventTypes: allTypes}}
		reg, err := apps.New([]*apps.App{&next})
		require.NoError(t, err)
		f.reg.Replace(reg)
		f.app = &next
	}
	reload(f.app.Secret)
	f.start(t, "r1", Options{})
	f.append(t, Event{Name: ChannelOccupied, Channel: "a"})
	<-arrived

	reload("rotated")
	select {
	case <-aborted:
		t.Fatal("the reload aborted a post under way")
	case <-time.After(finishGrace / 4):
	}
	close(release)
	// Same channel, so a resent occupied would arrive before it.
	f.append(t, Event{Name: ClientEvent, Channel: "a", Event: "client-after"})
	for range 2 {
		select {
		case <-arrived:
		case <-time.After(15 * time.Second):
			t.Fatal("the event after the reload did not arrive")
		}
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 && got[n-1] == ClientEvent+" client-after" {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{ChannelOccupied + " ", ClientEvent + " client-after"}, got)
}
