package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/appstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/wsclient"
)

// keyPair is one key and secret of an app.
type keyPair struct{ key, secret string }

// rotationBackend is an application server and its web clients through a
// secret rotation: the server signs with pusher-http-go (channel
// authorization, publishes and reads of the HTTP API) using its pair,
// and its clients connect with their key. Each moves to the new pair when
// the operator says so.
type rotationBackend struct {
	appID string
	api   string
	nodes []string

	mu     sync.Mutex
	server keyPair // what the application server signs with
	client string  // the key its clients connect with

	phase      atomic.Int32
	iterations [8]atomic.Int64 // per phase
	stopping   atomic.Bool
	done       chan struct{}
	refusals   []string // guarded by mu
}

func (b *rotationBackend) sdk() *pusher.Client {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &pusher.Client{AppID: b.appID, Key: b.server.key, Secret: b.server.secret, Host: b.api}
}

func (b *rotationBackend) clientKey() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.client
}

// run does what a busy application does, over and over: a client
// connects (to each wsnode in turn) and subscribes to a private channel
// the server authorizes, the server publishes on it and lists the
// channels. Anything refused is recorded with the phase it happened in.
func (b *rotationBackend) run() {
	defer close(b.done)
	for i := 0; !b.stopping.Load(); i++ {
		phase := b.phase.Load()
		if err := b.once(i); err != nil {
			b.mu.Lock()
			b.refusals = append(b.refusals, fmt.Sprintf("phase %d, round %d: %v", phase, i, err))
			b.mu.Unlock()
			continue
		}
		b.iterations[phase].Add(1)
	}
}

func (b *rotationBackend) once(i int) error {
	addr, key, sdk := b.nodes[i%len(b.nodes)], b.clientKey(), b.sdk()
	c, err := wsclient.Dial(addr, "/app/"+key+"?protocol=7&client=js&version=8.4.0&flash=false")
	if err != nil {
		return fmt.Errorf("connect to %s with key %s: %w", addr, key, err)
	}
	defer c.Close()
	id, err := establishedID(c)
	if err != nil {
		return fmt.Errorf("connect to %s with key %s: %w", addr, key, err)
	}
	ch := fmt.Sprintf("private-rot-%d", i)
	if err := subscribeAuthorized(c, sdk, id, ch); err != nil {
		return fmt.Errorf("socket of key %s on %s: %w", key, addr, err)
	}
	if err := sdk.Trigger(ch, "tick", map[string]int{"round": i}); err != nil {
		return fmt.Errorf("publish signed by %s: %w", sdk.Key, err)
	}
	if _, err := sdk.Channels(pusher.ChannelsParams{}); err != nil {
		return fmt.Errorf("channel list signed by %s: %w", sdk.Key, err)
	}
	return nil
}

// waitRounds waits until the backend has done n rounds without a refusal
// in the current phase.
func (b *rotationBackend) waitRounds(t *testing.T, n int64) {
	t.Helper()
	phase := b.phase.Load()
	waitFor(t, 20*time.Second, fmt.Sprintf("%d rounds in phase %d", n, phase), func() bool {
		return b.iterations[phase].Load() >= n
	})
}

// establishedID reads the socket's connection_established and returns its
// socket_id.
func establishedID(c *wsclient.Conn) (string, error) {
	msg, err := c.Read(5 * time.Second)
	if err != nil {
		return "", err
	}
	var outer struct{ Event, Data string }
	var inner struct {
		SocketID string `json:"socket_id"`
	}
	if json.Unmarshal([]byte(msg), &outer) != nil || outer.Event != "pusher:connection_established" ||
		json.Unmarshal([]byte(outer.Data), &inner) != nil {
		return "", fmt.Errorf("got %q, want connection_established", msg)
	}
	return inner.SocketID, nil
}

// subscribeAuthorized subscribes c (socket id) to the private channel ch
// with the authorization sdk signs, as an application server's auth
// endpoint does, and waits for subscription_succeeded.
func subscribeAuthorized(c *wsclient.Conn, sdk *pusher.Client, id, ch string) error {
	body, err := sdk.AuthorizePrivateChannel([]byte(url.Values{"socket_id": {id}, "channel_name": {ch}}.Encode()))
	if err != nil {
		return fmt.Errorf("authorize %s: %w", ch, err)
	}
	var a struct{ Auth string }
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("authorize %s: %s: %w", ch, body, err)
	}
	if err := c.Send(`{"event":"pusher:subscribe","data":{"channel":"` + ch + `","auth":"` + a.Auth + `"}}`); err != nil {
		return err
	}
	for {
		msg, err := c.Read(5 * time.Second)
		if err != nil {
			return fmt.Errorf("subscribe %s authorized by %s: %w", ch, sdk.Key, err)
		}
		if strings.Contains(msg, "subscription_succeeded") && strings.Contains(msg, ch) {
			return nil
		}
		if strings.Contains(msg, "error") || !strings.HasPrefix(msg, "{") {
			return fmt.Errorf("subscribe %s authorized by %s: %q", ch, sdk.Key, msg)
		}
	}
}

// rotationHooks is the app's webhook receiver: it checks every request
// with pusher-http-go against each pair it accepts and refuses (401) what
// none of them signed.
type rotationHooks struct {
	*httptest.Server
	mu       sync.Mutex
	accept   []keyPair
	verified map[string]int // by X-Pusher-Key
	refused  []string
}

func newRotationHooks(t *testing.T, appID string, accept ...keyPair) *rotationHooks {
	h := &rotationHooks{accept: accept, verified: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, p := range h.accept {
			c := &pusher.Client{AppID: appID, Key: p.key, Secret: p.secret}
			if _, err := c.Webhook(req.Header, body); err == nil {
				h.verified[p.key]++
				return
			}
		}
		h.refused = append(h.refused, fmt.Sprintf("X-Pusher-Key %s: %s", req.Header.Get("X-Pusher-Key"), body))
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *rotationHooks) setAccepted(accept ...keyPair) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.accept = accept
}

func (h *rotationHooks) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.verified[key]
}

// waitServed waits until every process at admins serves one apps version
// other than old, and returns it: the check docs/OPERATIONS.md has the
// operator make before the next step (headcount_apps_version_info).
func waitServed(t *testing.T, admins []string, old string) string {
	t.Helper()
	var now string
	waitFor(t, 10*time.Second, "every process to serve the new apps", func() bool {
		now = ""
		for _, adm := range admins {
			v := appsVersion(t, adm)
			if v == old || now != "" && v != now {
				return false
			}
			now = v
		}
		return true
	})
	return now
}

// TestSecretRotationWithoutAGap rotates an app's key and secret as
// docs/OPERATIONS.md says, on a running cluster (two wsnodes, a cleaner,
// an httpapi; the apps file swapped as the kubelet swaps a mounted
// Secret), while an application keeps working through it without pause:
// its server signs with pusher-http-go (channel authorization, publishes,
// channel lists) and its clients keep connecting to either wsnode and
// subscribing to private channels; a webhook receiver checks every request
// with pusher-http-go. Step 1 adds the new pair; once every process serves
// it, step 2 moves the server, then the clients, and has the receiver
// accept both pairs; step 3 makes the new pair the app's own and drops
// the old; once every process serves that, the receiver drops the old
// pair. What must hold: nothing is refused at any point, neither to the
// application nor by the receiver; webhooks arrive signed by the old pair
// before step 3 and by the new one after; then the old key is refused
// for new sockets and the HTTP API, and a socket that connected with it
// before the rotation is still served.
func TestSecretRotationWithoutAGap(t *testing.T) {
	t.Parallel()
	const appID = "rot"
	old, fresh := keyPair{"rot-old", "rot-old-secret"}, keyPair{"rot-new", "rot-new-secret"}
	hooks := newRotationHooks(t, appID, old)
	app := reloadApp{ID: appID, Key: old.key, Secret: old.secret,
		Webhooks: []map[string]any{{"url": hooks.URL, "event_types": []string{"channel_occupied", "channel_vacated"}}}}
	vol := appstest.NewKubeVolume(t, "apps.json", appsJSON(t, app))

	srv := redistest.New(t)
	common := []string{"--redis", srv.URL(), "--apps-file", vol.Path()}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	cl := startCleaner(t, "cleaner", common...)
	api := startHTTPAPIs(t, 1, common...)[0]
	for _, n := range []node{a, b, cl} {
		waitReady(t, n.p, n.admin)
	}
	admins := []string{a.admin, b.admin, cl.admin, api.admin}
	version := waitServed(t, admins, "")

	be := &rotationBackend{appID: appID, api: api.addr, nodes: []string{a.addr, b.addr},
		server: old, client: old.key, done: make(chan struct{})}
	// A socket that connects with the old key before the rotation and
	// stays: each phase it subscribes anew, authorized by the server's pair
	// of the moment.
	veteran, err := wsclient.Dial(a.addr, "/app/"+old.key+"?protocol=7")
	require.NoError(t, err)
	t.Cleanup(func() { _ = veteran.Close() })
	veteranID, err := establishedID(veteran)
	require.NoError(t, err)
	began := time.Now()
	endPhase := func(next int32) {
		t.Helper()
		be.waitRounds(t, 15)
		t.Logf("phase %d done at %v", be.phase.Load(), time.Since(began).Round(time.Millisecond))
		require.NoError(t, subscribeAuthorized(veteran, be.sdk(), veteranID, fmt.Sprintf("private-veteran-%d", be.phase.Load())),
			"the socket connected with the old key before the rotation")
		be.phase.Store(next)
	}
	go be.run()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			be.stopping.Store(true)
			<-be.done
		}
	}
	t.Cleanup(stop)

	// Before: everything signed with the old pair.
	endPhase(1)

	// Step 1: a second pair beside the first.
	app.Keys = []map[string]string{{"key": fresh.key, "secret": fresh.secret}}
	swapped := time.Now()
	vol.Write(appsJSON(t, app))
	version = waitServed(t, admins, version)
	t.Logf("step 1 served by every process after %v", time.Since(swapped).Round(time.Millisecond))
	endPhase(2)

	// Step 2: the receiver accepts both pairs, the server signs with the
	// new one, then the clients connect with the new key.
	hooks.setAccepted(old, fresh)
	be.mu.Lock()
	be.server = fresh
	be.mu.Unlock()
	endPhase(3)
	be.mu.Lock()
	be.client = fresh.key
	be.mu.Unlock()
	endPhase(4)

	// Step 3: the new pair becomes the app's own, the old one goes.
	app.Key, app.Secret, app.Keys = fresh.key, fresh.secret, nil
	swapped = time.Now()
	vol.Write(appsJSON(t, app))
	waitServed(t, admins, version)
	t.Logf("step 3 served by every process after %v", time.Since(swapped).Round(time.Millisecond))
	endPhase(5)

	// Once every process serves step 3, the receiver may forget the old pair.
	hooks.setAccepted(fresh)
	endPhase(6)
	be.waitRounds(t, 15)
	waitFor(t, 10*time.Second, "webhooks signed with the new pair", func() bool { return hooks.count(fresh.key) > 0 })
	stop()

	be.mu.Lock()
	refusals := be.refusals
	be.mu.Unlock()
	for p := range 7 {
		t.Logf("phase %d: %d rounds", p, be.iterations[p].Load())
	}
	require.Empty(t, refusals, "refused during the rotation")
	hooks.mu.Lock()
	t.Logf("webhooks verified, by key: %v", hooks.verified)
	require.Empty(t, hooks.refused, "webhooks the receiver could not verify")
	require.Positive(t, hooks.verified[old.key], "webhooks signed by the old pair before step 3")
	hooks.mu.Unlock()

	// The old pair is gone: a new socket with its key gets 4001, the HTTP
	// API refuses its signature.
	for _, addr := range []string{a.addr, b.addr} {
		c, err := wsclient.Dial(addr, "/app/"+old.key+"?protocol=7")
		require.NoError(t, err)
		msg, _ := c.Read(2 * time.Second)
		_ = c.Close()
		require.Contains(t, msg, "4001", "a new socket with the old key on %s", addr)
	}
	_, err = (&pusher.Client{AppID: appID, Key: old.key, Secret: old.secret, Host: api.addr}).Channels(pusher.ChannelsParams{})
	require.Error(t, err, "the old pair still signs HTTP API requests")
}
