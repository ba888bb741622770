package fanout

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/logging"
)

const (
	wait = 15 * time.Second
	tick = 5 * time.Millisecond
)

// TestMain fails the package if goroutines outlive its tests (redistest.Main).
func TestMain(m *testing.M) {
	redistest.Main(m)
}

type delivery struct {
	app string
	m   Message
}

// node is a Bus with Run going and every delivery recorded.
type node struct {
	*Bus
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error

	mu  sync.Mutex
	got []delivery
}

func newNode(t testing.TB, rdb redis.UniversalClient, log hclog.Logger) *node {
	t.Helper()
	if log == nil {
		log = logging.TestLogger(t)
	}
	reg := prometheus.NewRegistry()
	return &node{Bus: New(rdb, Options{Logger: log, Registerer: reg}), reg: reg}
}

// start runs the node's Bus until the test ends, and then checks that Run
// returned nil.
func (n *node) start(t testing.TB) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- n.Run(ctx, n.deliver) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

func (n *node) stop(t testing.TB) {
	t.Helper()
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("Run did not return after its context ended")
	}
}

func (n *node) deliver(app string, m Message) {
	n.mu.Lock()
	n.got = append(n.got, delivery{app, m})
	n.mu.Unlock()
}

// received returns the messages delivered for app's channel, in order.
func (n *node) received(app, channel string) []Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Message
	for _, d := range n.got {
		if d.app == app && d.m.Channel == channel {
			out = append(out, d.m)
		}
	}
	return out
}

func (n *node) all() []delivery {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]delivery(nil), n.got...)
}

func (n *node) waitHealthy(t testing.TB) {
	t.Helper()
	require.Eventually(t, n.Healthy, wait, tick, "bus never became healthy")
}

// waitFor waits until app's channel has had at least k deliveries.
func (n *node) waitFor(t testing.TB, app, channel string, k int) []Message {
	t.Helper()
	var got []Message
	require.Eventually(t, func() bool {
		got = n.received(app, channel)
		return len(got) >= k
	}, wait, tick, "%s/%s: %d of %d deliveries", app, channel, len(got), k)
	return got
}

// numSub asks Redis how many connections subscribe to app's channel: on a
// cluster the master of the topic's slot, since shard channels live there.
func numSub(t testing.TB, rdb redis.UniversalClient, app, channel string) int64 {
	t.Helper()
	ctx := context.Background()
	topic := keys{}.topic(app, channel)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, topic)
		require.NoError(t, err)
		res, err := m.PubSubShardNumSub(ctx, topic).Result()
		require.NoError(t, err)
		return res[topic]
	}
	res, err := rdb.PubSubNumSub(ctx, topic).Result()
	require.NoError(t, err)
	return res[topic]
}

// waitSubs waits until exactly want connections subscribe to app's channel.
func waitSubs(t testing.TB, rdb redis.UniversalClient, app, channel string, want int64) {
	t.Helper()
	var n int64
	require.Eventually(t, func() bool {
		n = numSub(t, rdb, app, channel)
		return n == want
	}, wait, tick, "%s/%s: %d subscribers in Redis, want %d", app, channel, n, want)
}

// publish publishes m, retrying errors until the deadline: publishes right
// after a Redis restart may fail, and at-most-once allows that.
func publish(t testing.TB, b *Bus, app string, m Message) {
	t.Helper()
	var err error
	require.Eventually(t, func() bool {
		err = b.Publish(context.Background(), app, m)
		return err == nil
	}, wait, 20*time.Millisecond, "publish: %v", err)
}

// lineCounter counts log lines containing each of some substrings.
type lineCounter struct {
	mu     sync.Mutex
	counts map[string]int
	subs   []string
}

func newLineCounter(subs ...string) *lineCounter {
	return &lineCounter{counts: map[string]int{}, subs: subs}
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, line := range strings.Split(string(p), "\n") {
		for _, s := range c.subs {
			if strings.Contains(line, s) {
				c.counts[s]++
			}
		}
	}
	return len(p), nil
}

func (c *lineCounter) count(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[s]
}

// countingLogger logs to t and into c.
func countingLogger(t testing.TB, c *lineCounter) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   t.Name(),
		Level:  hclog.Debug,
		Output: io.MultiWriter(c, testWriter{t}),
	})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
