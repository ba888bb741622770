package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/lease"
)

// deployment is one complete headcount (wsnode, cleaner, httpapi, and the
// app's webhook receiver) under one --redis-prefix.
type deployment struct {
	ks     keyspace.Space
	ws     node
	cl     node
	api    httpapiProc
	hooks  *hookReceiver
	client *pusher.Client
}

func startDeployment(t *testing.T, srv *redistest.Server, prefix string) *deployment {
	t.Helper()
	d := &deployment{ks: keyspace.New(prefix), hooks: newHookReceiver(t, 0)}
	appsFile := writeAppsFile(t, []map[string]any{{
		"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret,
		"webhooks": []map[string]any{{"url": d.hooks.URL + "/pusher/webhooks",
			"event_types": []string{"channel_occupied", "channel_vacated"}}},
	}})
	common := []string{"--redis", srv.URL(), "--apps-file", appsFile, "--redis-prefix", prefix}
	d.ws = startWSNode(t, prefix+"-ws", common...)
	d.cl = startCleaner(t, prefix+"-cleaner", common...)
	d.api = startHTTPAPIs(t, 1, common...)[0]
	for _, n := range []node{d.ws, d.cl} {
		waitReady(t, n.p, n.admin)
	}
	d.client = &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret, Host: d.api.addr}
	return d
}

// subscriptions reads channel's subscription count through d's API.
func (d *deployment) subscriptions(t *testing.T, channel string) int {
	t.Helper()
	ch, err := d.client.Channel(channel, pusher.ChannelParams{Info: ptr("subscription_count")})
	require.NoError(t, err)
	return ch.SubscriptionCount
}

// TestTwoDeploymentsShareRedis: two deployments with the same app id, key
// and channels but different --redis-prefix share one redis-server and
// never see each other: counts, fan-out, webhooks and their leases, and
// the cleaners' leases are each the deployment's own, and nothing is
// written under the default prefix.
func TestTwoDeploymentsShareRedis(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	blue, green := startDeployment(t, srv, "blue"), startDeployment(t, srv, "green")

	// news: one socket in each deployment; only-green: one in green.
	cb, _ := wsConnect(t, blue.ws.addr)
	wsSubscribe(t, cb, "", "news", "")
	cg, _ := wsConnect(t, green.ws.addr)
	wsSubscribe(t, cg, "", "news", "")
	wsSubscribe(t, cg, "", "only-green", "")

	// Counts: each API counts its own deployment's sockets only.
	require.Eventually(t, func() bool {
		return blue.subscriptions(t, "news") == 1 && green.subscriptions(t, "news") == 1 && green.subscriptions(t, "only-green") == 1
	}, 10*time.Second, 25*time.Millisecond, "the subscriptions were never counted")
	require.Zero(t, blue.subscriptions(t, "only-green"))

	// Fan-out: blue's event reaches blue's socket only. Green's socket
	// reads green's own event next, so blue's never reached it.
	waitTopicIn(t, rdb, blue.ks, "news", 1)
	waitTopicIn(t, rdb, green.ks, "news", 1)
	err := blue.client.Trigger("news", "from-blue", map[string]int{"n": 1})
	require.NoError(t, err)
	require.Equal(t, "from-blue", wsReadEvent(t, cb, "from-blue").Event)
	err = green.client.Trigger("news", "from-green", map[string]int{"n": 2})
	require.NoError(t, err)
	f := wsRead(t, cg)
	require.Equal(t, "from-green", f.Event, "green's socket got %+v", f)

	// Webhooks: each receiver hears its own deployment's channels. Blue
	// then occupies a channel of its own: by the time blue's webhook for it
	// arrives, a leaked only-green would have too.
	green.hooks.waitFor(t, 30*time.Second, "channel_occupied news", "channel_occupied only-green")
	wsSubscribe(t, cb, "", "only-blue", "")
	blue.hooks.waitFor(t, 30*time.Second, "channel_occupied news", "channel_occupied only-blue")
	blue.hooks.mu.Lock()
	blueGot := slices.Clone(blue.hooks.got)
	blue.hooks.mu.Unlock()
	require.NotContains(t, blueGot, "channel_occupied only-green")
	green.hooks.mu.Lock()
	greenGot := slices.Clone(green.hooks.got)
	green.hooks.mu.Unlock()
	require.NotContains(t, greenGot, "channel_occupied only-blue")

	// Leases: each deployment's cleaner and webhook deliverer holds its
	// own, so both are active at once.
	for _, d := range []*deployment{blue, green} {
		n, err := rdb.Exists(ctx, lease.CleanerKey(d.ks)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "%s's cleaner holds no lease", d.ks.Prefix())
		var leases []string
		require.NoError(t, keyspace.ScanPrefix(ctx, rdb, d.ks.App(e2eAppID)+"webhook-lease:", func(k string) { leases = append(leases, k) }))
		require.Len(t, slices.Compact(leases), 1, "%s's webhook leases", d.ks.Prefix())
	}

	// Nothing under the default prefix: every key and topic carries the
	// deployment's.
	var stray []string
	require.NoError(t, keyspace.ScanPrefix(ctx, rdb, keyspace.Space{}.Name(""), func(k string) { stray = append(stray, k) }))
	require.Empty(t, stray)
	topics, err := rdb.PubSubChannels(ctx, keyspace.GlobEscape(keyspace.Space{}.Name(""))+"*").Result()
	require.NoError(t, err)
	require.Empty(t, topics)
}
