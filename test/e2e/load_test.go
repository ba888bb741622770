package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/load"
)

// TestLoadTool runs a small scenario of the load tool against real
// processes: every socket opens and subscribes, the HTTP API counts them
// all, every published event reaches every hot subscriber, and churn
// replaces sockets without errors.
func TestLoadTool(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	srv := redistest.New(t)
	common := []string{"--redis", srv.URL()}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	api := startHTTPAPIs(t, 1, common...)[0]
	for _, n := range []node{a, b} {
		waitReady(t, n.p, n.admin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := load.Run(ctx, load.Config{
		WS: []string{a.addr, b.addr}, API: api.addr, AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret,
		Sockets: 300, Hold: 2 * time.Second, HotShare: 0.2, PresenceShare: 0.1, ColdChannels: 50,
		PublishRate: 10, ChurnRate: 10, SourceIPs: 4, ProbeEvery: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", sum)
	switch {
	case sum.ConnectErrors+sum.SubscribeErrors+sum.Dropped != 0:
		t.Fatalf("errors: %+v", sum)
	case sum.CountedAllSeconds == 0:
		t.Fatalf("the HTTP API never counted every socket: %+v", sum)
	case sum.Counted.N < 30: // churned sockets probe too
		t.Fatalf("%d of at least 30 probes counted", sum.Counted.N)
	case sum.Published == 0 || sum.Delivery.N < int(sum.Published)*50:
		// 60 hot sockets at first; churn may replace some by cold ones.
		t.Fatalf("%d deliveries for %d events", sum.Delivery.N, sum.Published)
	case sum.Churned == 0:
		t.Fatalf("no churn: %+v", sum)
	}

	// Only loopback targets.
	_, err = load.Run(ctx, load.Config{WS: []string{"10.0.0.1:6001"}, AppID: "a", Key: "k", Secret: "s", Sockets: 1})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.0/8 only") {
		t.Fatalf("a non-loopback target was accepted: %v", err)
	}
}
