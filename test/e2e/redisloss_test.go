package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/auth"
)

// capacityCall sends a signed admission request of the default app:
// method on /channels/{channel}/{what} with body, wanting 200.
func capacityCall(t *testing.T, addr, method, channel, what, body string) map[string]any {
	t.Helper()
	path := "/apps/" + e2eAppID + "/channels/" + channel + "/" + what
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	q := auth.SignRequest(method, path, nil, b, e2eAppKey, e2eAppSecret, time.Now())
	req, err := http.NewRequest(method, "http://"+addr+path+"?"+q.Encode(), bytes.NewReader(b))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", method, path, got)
	var m map[string]any
	require.NoError(t, json.Unmarshal(got, &m))
	return m
}

// TestRedisLostItsData runs docs/OPERATIONS.md's restore after Redis lost
// its data: Redis is killed under two wsnodes holding pusher-js clients
// and a presence member, stays down a moment, and comes back empty (a
// restart without persistence, or a failover to a replica that had
// nothing). While it is down the wsnodes and the httpapi are not ready and
// every socket stays open. Once it is back, each wsnode finds its
// contribution gone and republishes it (headcount_counts_resyncs_total
// {reason="published"}), the counts and the presence member read through
// the HTTP API are exact again within two heartbeats and a second, nobody
// reconnected, a cleaner is active again, and `cleaner audit` finds the
// counts consistent. What the nodes cannot know is gone: a capacity set
// through the API is, and the operator sets it again.
func TestRedisLostItsData(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	common := []string{"--redis", srv.URL()}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	cl := startCleaner(t, "cleaner", common...)
	for _, n := range []node{a, b, cl} {
		waitReady(t, n.p, n.admin)
	}
	api, client := startAPI(t, common...)

	pusherClients(t, a.addr, 4, "room-a", "room-b")
	pusherClients(t, b.addr, 3, "room-a")
	member, id := wsConnect(t, b.addr)
	wsSubscribe(t, member, id, "presence-room", `{"user_id":"u1"}`)
	want := map[string]int{"room-a": 7, "room-b": 4, "presence-room": 1}
	waitCounts(t, client, want, 10*time.Second, "every client counted")
	capacityCall(t, api.addr, http.MethodPut, "presence-room", "capacity", `{"capacity":5}`)

	nodes := []node{a, b}
	connected := make([]float64, len(nodes))
	published := make([]float64, len(nodes))
	for i, n := range nodes {
		connected[i] = metric(n.admin, "headcount_wsnode_connections_total")
		published[i] = metricSum(n.admin, "headcount_counts_resyncs_total", "reason", "published")
	}

	srv.KillAndHold(t)
	for _, n := range []node{a, b, api} {
		waitFor(t, 10*time.Second, n.p.name+" unready while Redis is down", func() bool {
			return httpStatus("http://"+n.admin+"/readyz") == http.StatusServiceUnavailable
		})
	}
	srv.Restart(t) // empty
	back := time.Now()

	waitCounts(t, client, want, 2*heartbeat+time.Second, "counts exact again after Redis came back empty")
	t.Logf("counts exact %v after Redis came back empty", time.Since(back).Round(time.Millisecond))
	info := "user_count"
	ch, err := client.Channel("presence-room", pusher.ChannelParams{Info: &info})
	require.NoError(t, err)
	require.Equal(t, 1, ch.UserCount, "the presence member republished")
	for i, n := range nodes {
		require.Equal(t, connected[i], metric(n.admin, "headcount_wsnode_connections_total"), "%s: a client reconnected", n.p.name)
		require.Greater(t, metricSum(n.admin, "headcount_counts_resyncs_total", "reason", "published"), published[i],
			"%s republished its contribution", n.p.name)
	}
	waitFor(t, leaseTTL+5*time.Second, "a cleaner active again", func() bool { return metric(cl.admin, "headcount_cleaner_active") == 1 })
	requireAudit(t, common...)

	// The capacity set through the API was in Redis only: set it again.
	require.EqualValues(t, 0, capacityCall(t, api.addr, http.MethodGet, "presence-room", "admission", "")["capacity"],
		"the capacity survived an empty Redis")
	capacityCall(t, api.addr, http.MethodPut, "presence-room", "capacity", `{"capacity":5}`)
	require.EqualValues(t, 5, capacityCall(t, api.addr, http.MethodGet, "presence-room", "admission", "")["capacity"])
}
