package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pusher/pusher-http-go/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/counts"
)

// e2eAppID, e2eAppKey and e2eAppSecret (httpapi_test.go) are the default
// app of every binary started without an apps file.

// apiResponse is one answer of the HTTP API.
type apiResponse struct {
	code   int
	header http.Header
	body   []byte
}

// apiGet sends a GET signed as the Pusher SDKs sign it.
func apiGet(c *http.Client, addr, path string, query url.Values) (apiResponse, error) {
	q := auth.SignRequest(http.MethodGet, path, query, nil, e2eAppKey, e2eAppSecret, time.Now())
	resp, err := c.Get("http://" + addr + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode())
	if err != nil {
		return apiResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return apiResponse{code: resp.StatusCode, header: resp.Header, body: b}, err
}

// seedCounts publishes n occupied channels name-00000... as one node's
// contribution, in one flush. The node never heartbeats again, so it goes
// stale: exactly what a node that died looks like until the cleaner runs.
func seedCounts(t testing.TB, rdb redis.UniversalClient, node, prefix string, n int) {
	t.Helper()
	rec := counts.NewRecorder(rdb, node, counts.RecorderOptions{Heartbeat: time.Hour})
	for i := range n {
		rec.Add(e2eAppID, fmt.Sprintf("%s%05d", prefix, i), int64(i%5+1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := rec.Flush(ctx); err != nil {
		t.Fatalf("seed counts: %v", err)
	}
}

// httpapiProc is one running httpapi process.
type httpapiProc struct {
	p     *proc
	addr  string
	admin string
}

func startHTTPAPIs(t testing.TB, n int, args ...string) []httpapiProc {
	t.Helper()
	out := make([]httpapiProc, n)
	for i := range out {
		h := httpapiProc{addr: freeAddr(t), admin: freeAddr(t)}
		h.p = start(t, fmt.Sprintf("httpapi-%d", i), "httpapi", append(append([]string{}, args...), "--addr", h.addr, "--admin-addr", h.admin)...)
		out[i] = h
	}
	for _, h := range out {
		waitReady(t, h.p, h.admin)
	}
	return out
}

// sumMetric adds a metric over processes; a labelled series that was never
// touched is absent from /metrics and counts 0.
func sumMetric(t testing.TB, procs []httpapiProc, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	for _, h := range procs {
		if v := metric(h.admin, name, labels...); v > 0 {
			sum += v
		}
	}
	return sum
}

const (
	computedMetric = "headcount_httpapi_listing_computed_total"
	sharedMetric   = "headcount_httpapi_listing_shared_total"
)

// storm sends n identical listing requests at once, spread round-robin over
// procs, and returns the answers.
func storm(t *testing.T, procs []httpapiProc, n int, query url.Values) []apiResponse {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	t.Cleanup(client.CloseIdleConnections)
	out := make([]apiResponse, n)
	errs := make([]error, n)
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ready
			out[i], errs[i] = apiGet(client, procs[i%len(procs)].addr, "/apps/"+e2eAppID+"/channels", query)
		}()
	}
	close(ready)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "request %d", i)
		require.Equal(t, http.StatusOK, out[i].code, "request %d: %s", i, out[i].body)
	}
	return out
}

// TestListingSingleFlight is the shared full listing end to end: 50 concurrent identical
// listing requests over 3 httpapi processes compute the listing once
// (asserted with each process's metrics), and a replica that died holding
// the lock delays the others by at most the lock TTL.
func TestListingSingleFlight(t *testing.T) {
	t.Parallel()
	t.Run("single", func(t *testing.T) {
		srv := redistest.New(t)
		singleFlightScenario(t, srv.Client(t), srv.Client(t), "--redis", srv.URL())
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.NewCluster(t)
		singleFlightScenario(t, c.Client(t), c.Client(t), "--redis-cluster", c.Seeds())
	})
}

// singleFlightScenario: deadConn is a client of its own for the replica
// that dies holding a lock (closing it is the death: a holder renews its
// lock while its process, and so its connection, lives).
func singleFlightScenario(t *testing.T, rdb, deadConn redis.UniversalClient, redisFlag, redisValue string) {
	const channels = 20000
	seedCounts(t, rdb, "seed", "room-", channels)
	// A long cache TTL, so "exactly once" cannot depend on how fast this
	// machine answers 50 requests; the lock TTL only matters for a dead holder.
	procs := startHTTPAPIs(t, 3, redisFlag, redisValue,
		"--listing-cache-ttl", "1m", "--listing-lock-ttl", "10s", "--stale-after", "500ms")

	start := time.Now()
	answers := storm(t, procs, 50, nil)
	t.Logf("50 listings of %d channels over 3 processes in %v", channels, time.Since(start).Round(time.Millisecond))
	require.EqualValues(t, 1, sumMetric(t, procs, computedMetric), "computed exactly once across the replicas")
	require.EqualValues(t, 49, sumMetric(t, procs, sharedMetric, "source", "cached")+sumMetric(t, procs, sharedMetric, "source", "waited"))
	t.Logf("shared: %v cached, %v waited", sumMetric(t, procs, sharedMetric, "source", "cached"), sumMetric(t, procs, sharedMetric, "source", "waited"))
	sources := map[string]int{}
	for _, a := range answers {
		require.Equal(t, string(answers[0].body), string(a.body), "every replica answers the same listing")
		sources[a.header.Get("X-Headcount-Listing")]++
		require.Equal(t, "1", a.header.Get("X-Headcount-Nodes"))
		age, err := strconv.Atoi(a.header.Get("X-Headcount-Age-Ms"))
		require.NoError(t, err)
		require.Less(t, age, 60000, "never older than the cache TTL")
	}
	require.Equal(t, 1, sources["computed"], sources)
	var list pusher.ChannelsList
	require.NoError(t, json.Unmarshal(answers[0].body, &list))
	require.Equal(t, channels, len(list.Channels))

	// The real SDK reads the shared listing too.
	client := &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret, Host: procs[1].addr}
	got, err := client.Channels(pusher.ChannelsParams{})
	require.NoError(t, err)
	require.Equal(t, channels, len(got.Channels))

	// A replica takes the lock of another listing (prefix room-1) and dies
	// before publishing: here a participant in this process whose Redis
	// connection is closed once it holds the lock, which leaves Redis
	// exactly as a SIGKILLed replica would (no renewals).
	const holderLockTTL = time.Second
	dead := counts.NewListings(deadConn, counts.ListingOptions{CacheTTL: time.Minute, LockTTL: holderLockTTL})
	holding := make(chan struct{})
	hctx, kill := context.WithCancel(context.Background())
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		_, _ = dead.SharedListing(hctx, e2eAppID, counts.ListingQuery{Prefix: "room-1"}, func(counts.Listing) ([]byte, error) {
			close(holding)
			<-hctx.Done()
			return nil, hctx.Err()
		})
	}()
	defer func() { kill(); <-holderDone }()
	<-holding
	require.NoError(t, deadConn.Close())
	before := sumMetric(t, procs, computedMetric)
	start = time.Now()
	answers = storm(t, procs, 30, url.Values{"filter_by_prefix": {"room-1"}})
	waited := time.Since(start)
	t.Logf("with the lock holder dead, 30 requests answered after %v (its lock TTL %v)", waited.Round(time.Millisecond), holderLockTTL)
	require.EqualValues(t, 1, sumMetric(t, procs, computedMetric)-before, "one survivor computes once the lock expires")
	require.Less(t, waited, holderLockTTL+10*time.Second)
	for _, a := range answers {
		require.Equal(t, string(answers[0].body), string(a.body))
	}
	var prefixed pusher.ChannelsList
	require.NoError(t, json.Unmarshal(answers[0].body, &prefixed))
	require.Equal(t, channels/2, len(prefixed.Channels))

	// Freshness: the seeding node never heartbeats, so past --stale-after
	// every count answer says one node is stale (awaiting the cleaner).
	hc := &http.Client{Timeout: 10 * time.Second}
	var last apiResponse
	require.Eventually(t, func() bool {
		last, err = apiGet(hc, procs[2].addr, "/apps/"+e2eAppID+"/channels/room-00007", url.Values{"info": {"subscription_count,rank"}})
		return err == nil && last.header.Get("X-Headcount-Stale-Nodes") == "1"
	}, 10*time.Second, 20*time.Millisecond)
	oldest, err := strconv.Atoi(last.header.Get("X-Headcount-Oldest-Heartbeat-Ms"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, oldest, 500)
	var ch pusher.Channel
	require.NoError(t, json.Unmarshal(last.body, &ch))
	require.Equal(t, 3, ch.SubscriptionCount)
	require.Contains(t, string(last.body), `"rank":`)
}
