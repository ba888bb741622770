package cache

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/keyspace"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newStore(t *testing.T, rdb redis.UniversalClient, ttl time.Duration) (*Store, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return New(rdb, Options{Keyspace: keyspace.New("t" + strings.ToLower(strings.NewReplacer("/", "", "_", "").Replace(t.Name()))), TTL: ttl, Registerer: reg}), reg
}

func set(t *testing.T, s *Store, app, ch, event, data string) {
	t.Helper()
	var cmd *redis.StatusCmd
	_, err := s.rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		cmd = s.QueueSet(context.Background(), p, app, ch, event, data)
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, cmd.Err())
}

func TestKeys(t *testing.T) {
	k := keys{keyspace.New("blue")}
	require.Equal(t, "blue:{app-1}:cache:cache-x", k.entry("app-1", "cache-x"))
	require.Equal(t, "blue:{app-1}:cache-miss:cache-x", k.missed("app-1", "cache-x"))
}

// TestLastWriteServed: Fetch and Get return the last event written, with
// what is left of its TTL, and count hits and misses.
func TestLastWriteServed(t *testing.T) {
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newStore(t, rdb, time.Minute)
		_, ok, _, err := s.Fetch(ctx, "a", "cache-x", false)
		require.NoError(t, err)
		require.False(t, ok)
		_, ok, err = s.Get(ctx, "a", "cache-x")
		require.NoError(t, err)
		require.False(t, ok)

		set(t, s, "a", "cache-x", "first", `{"n":1}`)
		set(t, s, "a", "cache-x", "ev:with:colons", `{"n":2,"s":"a:b"}`)
		e, ok, report, err := s.Fetch(ctx, "a", "cache-x", true)
		require.NoError(t, err)
		require.True(t, ok)
		require.False(t, report)
		require.Equal(t, "ev:with:colons", e.Event)
		require.Equal(t, `{"n":2,"s":"a:b"}`, e.Data)
		require.InDelta(t, time.Minute.Seconds(), e.TTL.Seconds(), 5)

		g, ok, err := s.Get(ctx, "a", "cache-x")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, e.Event, g.Event)
		require.Equal(t, e.Data, g.Data)
		require.Greater(t, g.TTL, 50*time.Second)

		// Another app's channel of the same name is its own.
		_, ok, _, err = s.Fetch(ctx, "b", "cache-x", false)
		require.NoError(t, err)
		require.False(t, ok)

		require.Equal(t, 1.0, testutil.ToFloat64(s.hits))
		require.Equal(t, 2.0, testutil.ToFloat64(s.misses))
	})
}

// TestEntryExpires: an entry lives its TTL, then subscribers miss.
func TestEntryExpires(t *testing.T) {
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newStore(t, rdb, 200*time.Millisecond)
		set(t, s, "a", "cache-x", "e", "d")
		pttl, err := rdb.PTTL(ctx, s.entry("a", "cache-x")).Result()
		require.NoError(t, err)
		require.Greater(t, pttl, time.Duration(0))
		require.LessOrEqual(t, pttl, 200*time.Millisecond)
		require.Eventually(t, func() bool {
			_, ok, _, err := s.Fetch(ctx, "a", "cache-x", false)
			return err == nil && !ok
		}, 5*time.Second, 20*time.Millisecond)
	})
}

// TestMissReportedOnce: of many concurrent misses on one empty channel,
// exactly one is to be reported to the webhook; a publish ends the report,
// so the miss after the entry is gone is reported again.
func TestMissReportedOnce(t *testing.T) {
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newStore(t, rdb, 300*time.Millisecond)
		// Without a webhook nothing is reported, nor marked.
		_, _, report, err := s.Fetch(ctx, "a", "cache-x", false)
		require.NoError(t, err)
		require.False(t, report)

		reports := func() int {
			var mu sync.Mutex
			var wg sync.WaitGroup
			n := 0
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, ok, report, err := s.Fetch(ctx, "a", "cache-x", true)
					require.NoError(t, err)
					require.False(t, ok)
					if report {
						mu.Lock()
						n++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			return n
		}
		require.Equal(t, 1, reports())
		require.Equal(t, 0, reports())

		set(t, s, "a", "cache-x", "e", "d")
		n, err := rdb.Exists(ctx, s.missed("a", "cache-x")).Result()
		require.NoError(t, err)
		require.Zero(t, n, "a publish ends the reported miss")
		require.Eventually(t, func() bool {
			_, ok, _, err := s.Fetch(ctx, "a", "cache-x", false)
			return err == nil && !ok
		}, 5*time.Second, 20*time.Millisecond)
		require.Equal(t, 1, reports())

		pttl, err := rdb.PTTL(ctx, s.missed("a", "cache-x")).Result()
		require.NoError(t, err)
		require.Greater(t, pttl, time.Duration(0))
		require.LessOrEqual(t, pttl, MissReportWindow)
	})
}

func TestCodec(t *testing.T) {
	for _, c := range [][2]string{{"e", ""}, {"", "d"}, {"a:b", "1:x"}, {"日本", `{"x":"\n"}`}} {
		e, err := decode(encode(c[0], c[1]))
		require.NoError(t, err)
		require.Equal(t, c[0], e.Event)
		require.Equal(t, c[1], e.Data)
	}
	for _, bad := range []string{"", "x", "5:abc", "-1:a", "a:b", "01:a", "+1:a"} {
		_, err := decode(bad)
		require.Error(t, err, bad)
	}
}

// FuzzDecode: whatever Redis hands back, decode never panics, and what it
// accepts is exactly what encode writes.
func FuzzDecode(f *testing.F) {
	f.Add(encode("price", `{"usd":1}`))
	f.Add("3:ab")
	f.Add("03:abc")
	f.Fuzz(func(t *testing.T, v string) {
		e, err := decode(v)
		if err == nil && encode(e.Event, e.Data) != v {
			t.Fatalf("%q decodes to %+v, which encodes to %q", v, e, encode(e.Event, e.Data))
		}
	})
}
