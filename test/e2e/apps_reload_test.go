package e2e

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"

	"github.com/headcount/headcount/internal/appstest"
	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/wsclient"
)

// reloadApp is an app of the apps file this test swaps.
type reloadApp struct {
	ID       string              `json:"id"`
	Key      string              `json:"key"`
	Secret   string              `json:"secret"`
	Enabled  *bool               `json:"enabled,omitempty"`
	Keys     []map[string]string `json:"keys,omitempty"`
	Webhooks []map[string]any    `json:"webhooks,omitempty"`
}

func appsJSON(t *testing.T, list ...reloadApp) string {
	t.Helper()
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAppsReloadLive swaps the apps file of a running cluster (two
// wsnodes, a cleaner, an httpapi) the way Kubernetes updates a mounted
// Secret, as an operator would on day two: one swap adds an app, gives the
// busy app a second key pair and a webhook, removes an app and disables
// another; then a broken file. What must hold: the busy app's pusher-js
// clients never reconnect and its counts stay exact; the removed app's
// sockets are closed with 4001, the disabled one's with 4003; the second
// key works for sockets and the HTTP API on every process within 5 s; the
// new webhook is delivered; the broken file changes nothing, is counted as
// a failed reload everywhere and leaves every process ready.
func TestAppsReloadLive(t *testing.T) {
	t.Parallel()
	receiver := newHookReceiver(t, 0)
	off := false
	busy := reloadApp{ID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret}
	gone := reloadApp{ID: "gone", Key: "gone-key", Secret: "gone-secret"}
	calm := reloadApp{ID: "calm", Key: "calm-key", Secret: "calm-secret"}
	// rot's secret is rotated as docs/REFERENCE.md#rotating-a-secret says.
	rot := reloadApp{ID: "rot", Key: "rot-old", Secret: "rot-old-secret"}
	vol := appstest.NewKubeVolume(t, "apps.json", appsJSON(t, busy, gone, calm, rot))

	srv := redistest.New(t)
	// --apps-refresh 1h: only the watch of the volume's directory can see
	// the swap within the test's deadlines.
	common := []string{"--redis", srv.URL(), "--apps-file", vol.Path(), "--apps-refresh", "1h"}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	cl := startCleaner(t, "cleaner", common...)
	api := startHTTPAPIs(t, 1, common...)[0]
	for _, n := range []node{a, b, cl} {
		waitReady(t, n.p, n.admin)
	}
	admins := []string{a.admin, b.admin, cl.admin, api.admin}

	const clients = 8
	pusherClients(t, a.addr+","+b.addr, clients, "room-a", "room-b")
	client := &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret, Host: api.addr}
	waitCounts(t, client, map[string]int{"room-a": clients, "room-b": clients}, 10*time.Second, "the busy app's counts")

	goneSock := dialApp(t, a.addr, gone.Key)
	offSock := dialApp(t, b.addr, calm.Key)
	calmSock := dialApp(t, a.addr, calm.Key)
	_ = calmSock

	// The swap.
	calm.Enabled = &off
	busy.Keys = []map[string]string{{"key": "second-key", "secret": "second-secret"}}
	rotSock := dialApp(t, a.addr, rot.Key)
	rot.Keys = []map[string]string{{"key": "rot-new", "secret": "rot-new-secret"}} // step 1: add a pair
	busy.Webhooks = []map[string]any{{"url": receiver.URL, "event_types": []string{"channel_occupied"}}}
	fresh := reloadApp{ID: "fresh", Key: "fresh-key", Secret: "fresh-secret"}
	connected := metric(a.admin, "headcount_wsnode_connections_total") + metric(b.admin, "headcount_wsnode_connections_total")
	swapped := time.Now()
	vol.Write(appsJSON(t, busy, calm, fresh, rot))

	requireClosedWith(t, goneSock, 4001)
	requireClosedWith(t, offSock, 4003)
	for _, addr := range []string{a.addr, b.addr} {
		c := dialApp(t, addr, "second-key") // fails the test unless connection_established
		_ = c.Close()
		c = dialApp(t, addr, fresh.Key)
		_ = c.Close()
	}
	second := &pusher.Client{AppID: e2eAppID, Key: "second-key", Secret: "second-secret", Host: api.addr}
	waitFor(t, 5*time.Second-time.Since(swapped), "the second key signs HTTP API requests", func() bool {
		_, err := second.Channels(pusher.ChannelsParams{})
		return err == nil
	})
	t.Logf("swap served everywhere after %v", time.Since(swapped).Round(time.Millisecond))
	// Step 2: the backend signs with the new pair while clients still
	// connect with the old key.
	requireSubscribed(t, rotSock, "rot-new", "rot-new-secret", "private-rot")
	// The webhook added applies at once: a channel occupied now is told.
	c := dialApp(t, b.addr, e2eAppKey)
	if err := c.Send(`{"event":"pusher:subscribe","data":{"channel":"room-new"}}`); err != nil {
		t.Fatal(err)
	}
	receiver.waitFor(t, 10*time.Second, "channel_occupied room-new")
	_ = c.Close()

	// The busy app's clients: still the same sockets, counts exact.
	waitCounts(t, client, map[string]int{"room-a": clients, "room-b": clients}, 10*time.Second, "the busy app's counts")
	// Sockets opened since the swap: 4 by the new keys, 1 subscriber.
	if now := metric(a.admin, "headcount_wsnode_connections_total") + metric(b.admin, "headcount_wsnode_connections_total"); now != connected+5 {
		t.Fatalf("connections since the swap: %v, want 5: pusher-js clients reconnected", now-connected)
	}
	for _, adm := range []string{a.admin, b.admin} {
		if v := metric(adm, "headcount_wsnode_connections_open"); v < clients/2-1 {
			t.Fatalf("%s: %v sockets open", adm, v)
		}
	}

	// A broken file: a pair without a secret.
	version := appsVersion(t, a.admin)
	failedBefore := make([]float64, len(admins))
	for i, adm := range admins {
		failedBefore[i] = metric(adm, "headcount_apps_reloads_total", "result", "failed")
	}
	busy.Keys = []map[string]string{{"key": "third-key"}}
	vol.Write(appsJSON(t, busy, calm, fresh, rot))
	for i, adm := range admins {
		waitFor(t, 5*time.Second, adm+" counts the failed reload", func() bool {
			return metric(adm, "headcount_apps_reloads_total", "result", "failed") == failedBefore[i]+1
		})
		if v := appsVersion(t, adm); v != version {
			t.Fatalf("%s serves %s after a broken file, want %s", adm, v, version)
		}
		if v := metric(adm, "headcount_apps_source_up"); v != 0 {
			t.Fatalf("%s: headcount_apps_source_up %v after a broken file", adm, v)
		}
	}
	for _, n := range []node{a, b, cl, {p: api.p, admin: api.admin}} {
		waitReady(t, n.p, n.admin)
		if b, _ := os.ReadFile(n.p.log); !strings.Contains(string(b), "the apps changed but are not valid; the last good apps keep serving") {
			t.Fatalf("%s: no ERROR naming the broken apps file", n.p.name)
		}
	}
	c = dialApp(t, a.addr, "second-key")
	_ = c.Close()

	// Step 3: the new pair becomes the app's own, the old one goes. New
	// connections with the old key are refused; the socket that connected
	// with it stays, and the old secret signs nothing any more.
	busy.Keys = []map[string]string{{"key": "second-key", "secret": "second-secret"}}
	rot.Key, rot.Secret, rot.Keys = "rot-new", "rot-new-secret", nil
	vol.Write(appsJSON(t, busy, calm, fresh, rot))
	for _, addr := range []string{a.addr, b.addr} {
		waitFor(t, 5*time.Second, "the old key refused on "+addr, func() bool {
			c, err := wsclient.Dial(addr, "/app/rot-old?protocol=7")
			if err != nil {
				return false
			}
			defer c.Close()
			msg, _ := c.Read(2 * time.Second)
			return strings.Contains(msg, "4001")
		})
	}
	requireSubscribed(t, rotSock, "rot-new", "rot-new-secret", "private-rot-2")
	old := &pusher.Client{AppID: "rot", Key: "rot-old", Secret: "rot-old-secret", Host: api.addr}
	if _, err := old.Channels(pusher.ChannelsParams{}); err == nil {
		t.Fatal("the removed pair still signs HTTP API requests")
	}
	waitCounts(t, client, map[string]int{"room-a": clients, "room-b": clients}, 10*time.Second, "the busy app's counts")
}

// appSock is a raw socket and the socket id it was given.
type appSock struct {
	*wsclient.Conn
	id string
}

// dialApp opens a raw socket with key and waits for its
// connection_established.
func dialApp(t *testing.T, addr, key string) *appSock {
	t.Helper()
	var last string
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := wsclient.Dial(addr, "/app/"+key+"?protocol=7")
		if err != nil {
			t.Fatal(err)
		}
		msg, err := c.Read(2 * time.Second)
		if err == nil && strings.Contains(msg, "pusher:connection_established") {
			t.Cleanup(func() { _ = c.Close() })
			var outer struct{ Data string }
			var inner struct {
				SocketID string `json:"socket_id"`
			}
			if json.Unmarshal([]byte(msg), &outer) != nil || json.Unmarshal([]byte(outer.Data), &inner) != nil {
				t.Fatalf("connection_established %q", msg)
			}
			return &appSock{Conn: c, id: inner.SocketID}
		}
		_ = c.Close()
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("%s with key %s: got %q, %v; want connection_established", addr, key, last, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// requireSubscribed subscribes c to the private channel ch with channel
// auth signed by the pair key/secret, wanting subscription_succeeded.
func requireSubscribed(t *testing.T, c *appSock, key, secret, ch string) {
	t.Helper()
	sig := key + ":" + auth.Sign(secret, auth.ChannelAuthString(c.id, ch, ""))
	if err := c.Send(`{"event":"pusher:subscribe","data":{"channel":"` + ch + `","auth":"` + sig + `"}}`); err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := c.Read(5 * time.Second)
		if err != nil {
			t.Fatalf("subscribe %s signed by %s: %v", ch, key, err)
		}
		if strings.Contains(msg, "subscription_succeeded") && strings.Contains(msg, ch) {
			return
		}
		if strings.Contains(msg, "error") {
			t.Fatalf("subscribe %s signed by %s: %s", ch, key, msg)
		}
	}
}

// requireClosedWith reads c until the server closes it, wanting code in
// both its pusher:error and its close frame.
func requireClosedWith(t *testing.T, c *appSock, code int) {
	t.Helper()
	sawError := false
	for {
		msg, err := c.Read(5 * time.Second)
		if err != nil {
			t.Fatalf("socket not closed with %d: %v", code, err)
		}
		if strings.Contains(msg, `"pusher:error"`) && strings.Contains(msg, strconv.Itoa(code)) {
			sawError = true
			continue
		}
		if len(msg) >= 2 && int(msg[0])<<8|int(msg[1]) == code {
			if !sawError {
				t.Fatalf("closed with %d without a pusher:error first", code)
			}
			return
		}
	}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// appsVersion is the hash of headcount_apps_version_info at admin.
func appsVersion(t *testing.T, admin string) string {
	t.Helper()
	f, err := metricstest.Scrape("http://" + admin + "/metrics")
	hashes := f.LabelValues("headcount_apps_version_info", "hash")
	if len(hashes) == 0 {
		t.Fatalf("%s: no headcount_apps_version_info (%v)", admin, err)
	}
	return hashes[0]
}
