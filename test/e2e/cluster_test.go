package e2e

import (
	"fmt"
	"maps"
	"syscall"
	"testing"
	"time"

	"github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

const (
	heartbeat    = 250 * time.Millisecond
	deadAfter    = 2 * time.Second
	scanInterval = 250 * time.Millisecond
	leaseTTL     = 2 * time.Second
	drain        = 300 * time.Millisecond
)

// TestCrashedNodesAreCleanedUp is the walking skeleton end to end: three
// wsnodes with real pusher-js clients, two cleaners, one httpapi read with
// pusher-http-go. A SIGKILLed node's counts are gone within dead-after +
// scan-interval + 1 s; with the active cleaner SIGKILLed too, the passive one
// takes over and corrects the counts within one more lease TTL; a SIGTERMed
// node drains and removes its own counts.
func TestCrashedNodesAreCleanedUp(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.New(t)
		crashScenario(t, "--redis", srv.URL())
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.NewCluster(t)
		crashScenario(t, "--redis-cluster", c.Seeds())
	})
}

func crashScenario(t *testing.T, redisFlag, redisValue string) {
	common := []string{redisFlag, redisValue}
	a, b, c := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...), startWSNode(t, "ws-c", common...)
	cl1 := startCleaner(t, "cleaner-1", common...)
	waitReady(t, cl1.p, cl1.admin)
	require.Eventually(t, func() bool { return metric(cl1.admin, "headcount_cleaner_active") == 1 }, 10*time.Second, 10*time.Millisecond)
	cl2 := startCleaner(t, "cleaner-2", common...)
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", append(common, "--addr", api.addr, "--admin-addr", api.admin)...)
	for _, n := range []node{a, b, c, cl2, api} {
		waitReady(t, n.p, n.admin)
	}
	require.EqualValues(t, 0, metric(cl2.admin, "headcount_cleaner_active"), "the second cleaner starts passive")

	pusherClients(t, a.addr, 4, "room-a", "room-b")
	pusherClients(t, b.addr, 3, "room-a")
	pusherClients(t, c.addr, 2, "room-a", "room-c")

	client := &pusher.Client{AppID: "app-id", Key: "app-key", Secret: "app-secret", Host: api.addr}
	waitCounts(t, client, map[string]int{"room-a": 9, "room-b": 4, "room-c": 2}, 10*time.Second, "all clients counted")

	// A node crashes: only the cleaner can fix its counts.
	killed := time.Now()
	a.p.kill(t)
	waitCounts(t, client, map[string]int{"room-a": 5, "room-c": 2}, deadAfter+scanInterval+time.Second+heartbeat,
		"ws-a's counts removed within dead-after + scan-interval + 1 s")
	t.Logf("ws-a SIGKILLed: counts exact again after %v", time.Since(killed).Round(time.Millisecond))

	// The active cleaner dies too, then another node: the passive cleaner
	// takes over within one lease TTL and corrects the counts.
	active, passive := cl1, cl2
	if metric(cl2.admin, "headcount_cleaner_active") == 1 {
		active, passive = cl2, cl1
	}
	active.p.kill(t)
	killed = time.Now()
	b.p.kill(t)
	waitCounts(t, client, map[string]int{"room-a": 2, "room-c": 2}, leaseTTL+deadAfter+scanInterval+time.Second+heartbeat,
		"the passive cleaner removes ws-b's counts within one more lease TTL")
	t.Logf("cleaner and ws-b SIGKILLed: counts exact again after %v", time.Since(killed).Round(time.Millisecond))
	require.EqualValues(t, 1, metric(passive.admin, "headcount_cleaner_active"))

	// A graceful stop removes the node's own counts without the cleaner.
	passive.p.signal(syscall.SIGTERM)
	require.Equal(t, 0, passive.p.wait(t, 10*time.Second), "cleaner exits 0 on SIGTERM")
	stopped := time.Now()
	c.p.signal(syscall.SIGTERM)
	require.Equal(t, 0, c.p.wait(t, drain+10*time.Second), "wsnode exits 0 on SIGTERM")
	waitCounts(t, client, map[string]int{}, time.Second, "a drained node removes its own counts")
	t.Logf("ws-c SIGTERMed: drained and counts removed after %v", time.Since(stopped).Round(time.Millisecond))
}

// waitCounts polls the HTTP API, through pusher-http-go, until the occupied
// channels and their subscription counts equal want, failing after within.
func waitCounts(t *testing.T, client *pusher.Client, want map[string]int, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got map[string]int
	var err error
	for {
		got, err = readCounts(client)
		if err == nil && maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %v counts are %v (err %v), want %v", what, within, got, err, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func readCounts(client *pusher.Client) (map[string]int, error) {
	list, err := client.Channels(pusher.ChannelsParams{})
	if err != nil {
		return nil, err
	}
	info := "subscription_count"
	out := map[string]int{}
	for name := range list.Channels {
		ch, err := client.Channel(name, pusher.ChannelParams{Info: &info})
		if err != nil {
			return nil, err
		}
		if !ch.Occupied {
			return nil, fmt.Errorf("%s listed but not occupied", name)
		}
		out[name] = ch.SubscriptionCount
	}
	return out, nil
}
