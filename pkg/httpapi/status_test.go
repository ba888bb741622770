package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/apitest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/lease"
	"github.com/headcount/headcount/pkg/logging"
)

// statusStaleAfter is the tests' --stale-after: short, so a node that
// stops heartbeating turns stale quickly.
const statusStaleAfter = 300 * time.Millisecond

// startStatus runs an App with the audit cached for auditEvery, until the
// test ends.
func startStatus(t *testing.T, common config.Common, auditEvery time.Duration) *testServer {
	t.Helper()
	common.AdminAddr = "127.0.0.1:0"
	common.Apps = testApps(t)
	reg := prometheus.NewRegistry()
	a, err := New(Options{Config: config.HTTPAPI{Common: common, Addr: "127.0.0.1:0", StaleAfter: statusStaleAfter},
		Logger: logging.TestLogger(t), Registry: reg})
	require.NoError(t, err)
	a.audits.every = auditEvery
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	return &testServer{app: a, base: "http://" + a.Addr(), reg: reg}
}

// TestStatusAdmissionAuditEndpoints walks the signed read-only endpoints
// status.go serves: GET .../status, .../admission and .../audit.
func TestStatusAdmissionAuditEndpoints(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		common := config.Common{}
		if b.Cluster != nil {
			common.RedisCluster = b.Cluster.Seeds()
		} else {
			common.Redis = b.Single.URL()
		}
		s := startStatus(t, common, 200*time.Millisecond)
		base := "/apps/" + appID

		// A node that stopped heartbeating and one that is alive.
		dead := counts.NewRecorder(rdb, "node-dead", counts.RecorderOptions{Heartbeat: time.Hour})
		dead.AddConnections(appID, 3)
		dead.Add(appID, "public-x", 3)
		require.NoError(t, dead.Flush(ctx))
		live := apitest.NewProducer(t, rdb, "node-live")
		live.Rec.AddConnections(appID, 1)
		live.Add(t, appID, map[string]int64{"public-x": 1}, map[string]int64{"public-x": 4})

		held := lease.New(rdb, lease.CleanerKey(keyspace.Space{}), 3*time.Second)
		ok, err := held.TryAcquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)

		var st statusJSON
		deadline := time.Now().Add(10 * time.Second)
		for {
			st = statusJSON{}
			require.NoError(t, json.Unmarshal([]byte(decodeBody(t, s.get(t, base+"/status", nil))), &st))
			if len(st.Nodes) == 2 && st.Nodes[0].Stale && !st.Nodes[1].Stale {
				break
			}
			require.False(t, time.Now().After(deadline), "node-dead never turned stale alone: %+v", st)
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, "node-dead", st.Nodes[0].ID, "oldest heartbeat first")
		require.EqualValues(t, 3, st.Nodes[0].Connections)
		require.GreaterOrEqual(t, st.Nodes[0].AgeMs, statusStaleAfter.Milliseconds())
		require.Equal(t, st.TimeMs-st.Nodes[0].LastSeenMs, st.Nodes[0].AgeMs)
		require.Equal(t, "node-live", st.Nodes[1].ID)
		require.EqualValues(t, 1, st.Nodes[1].Connections)
		require.EqualValues(t, 4, st.Connections)
		require.EqualValues(t, statusStaleAfter.Milliseconds(), st.StaleAfterMs)
		require.True(t, st.Cleaner.Held)
		require.Equal(t, held.Token()[:8], st.Cleaner.Holder)
		require.Positive(t, st.Cleaner.ExpiresInMs)
		require.NotContains(t, decodeBody(t, s.get(t, base+"/status", nil)), held.Token(), "only a short id of the token")

		// Waiting lists: presence-room- has a capacity of 2 in testApps.
		room := base + "/channels/presence-room-1/admission"
		for _, u := range []string{"u1", "u2", "u3", "u4"} {
			decode(t, s.send(t, http.MethodPost, room, `{"user_id":"`+u+`"}`))
		}
		require.Equal(t, `{"channels":[{"channel":"presence-room-1","capacity":2,"occupancy":2,"waiting":2}]}`+"\n",
			decodeBody(t, s.get(t, base+"/admission", nil)))
		decode(t, s.send(t, http.MethodDelete, room, `{"user_id":"u1"}`))
		require.Equal(t, `{"channels":[{"channel":"presence-room-1","capacity":2,"occupancy":2,"waiting":1}]}`+"\n",
			decodeBody(t, s.get(t, base+"/admission", url.Values{"limit": {"5"}})))
		r := s.get(t, base+"/admission", url.Values{"limit": {"0"}})
		require.Equal(t, http.StatusBadRequest, r.code, r.body)

		// The audit: consistent, then cached while a count drifts, then
		// the drift once the cache expired.
		var au auditJSON
		require.NoError(t, json.Unmarshal([]byte(decodeBody(t, s.get(t, base+"/audit", nil))), &au))
		require.Equal(t, 0, au.Differences, "%+v", au)
		require.Equal(t, 2, au.Nodes)
		require.NoError(t, counts.CorruptChannel(ctx, rdb, keyspace.Space{}, appID, "public-x", 5))
		deadline = time.Now().Add(10 * time.Second)
		for au.Differences == 0 {
			require.False(t, time.Now().After(deadline), "the drift never showed")
			time.Sleep(20 * time.Millisecond)
			au = auditJSON{}
			require.NoError(t, json.Unmarshal([]byte(decodeBody(t, s.get(t, base+"/audit", nil))), &au))
		}
		require.Equal(t, []diffJSON{{Kind: "channel", Channel: "public-x", Want: 4, Have: 9, Present: true}}, au.Drift)

		// Signed like every /apps/ route.
		r = s.do(t, http.MethodGet, base+"/status", "", nil)
		require.Equal(t, http.StatusUnauthorized, r.code, r.body)
		r = s.do(t, http.MethodGet, base+"/audit", "auth_key=nope", nil)
		require.Equal(t, http.StatusUnauthorized, r.code, r.body)
	})
}

// decodeBody returns a 200 answer's body.
func decodeBody(t testing.TB, r response) string {
	t.Helper()
	require.Equal(t, http.StatusOK, r.code, r.body)
	return r.body
}
