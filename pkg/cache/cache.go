package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/keyspace"
)

// DefaultTTL is how long a cached event lives after its publish: Pusher's
// "up to 30 minutes".
const DefaultTTL = 30 * time.Minute

// MissReportWindow is how long a miss reported to the cache_miss webhook
// stays reported while the channel's cache stays empty: a burst of
// subscribers to an empty channel, on any nodes, makes one webhook (Pusher
// de-duplicates them too), and an app server that did not refill the
// cache hears of it again after this.
const MissReportWindow = 10 * time.Second

// Entry is a cached event.
type Entry struct {
	Event string
	Data  string
	// TTL is what is left of the entry's life when it was read.
	TTL time.Duration
}

// Options configures a Store. The zero value works.
type Options struct {
	// Keyspace names the keys; the zero Keyspace has the default prefix.
	Keyspace keyspace.Space
	// TTL is how long an entry lives after its write; zero means DefaultTTL.
	TTL time.Duration
	// Registerer receives the hit and miss counters; nil means none.
	Registerer prometheus.Registerer
}

// Store reads and writes the apps' cached events.
type Store struct {
	keys
	rdb    redis.UniversalClient
	ttl    time.Duration
	hits   prometheus.Counter
	misses prometheus.Counter
}

// New returns a Store on rdb.
func New(rdb redis.UniversalClient, opts Options) *Store {
	ttl := opts.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	f := promauto.With(opts.Registerer)
	return &Store{keys: keys{opts.Keyspace}, rdb: rdb, ttl: ttl,
		hits: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_cache_hits_total",
			Help: "Subscriptions to a cache channel answered with its cached event.",
		}),
		misses: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_cache_misses_total",
			Help: "Subscriptions to a cache channel answered with pusher:cache_miss (nothing cached, or Redis did not answer).",
		}),
	}
}

// TTL is how long an entry lives after its write.
func (s *Store) TTL() time.Duration { return s.ttl }

// QueueSet queues on p the write of event as channel's cached event, and
// the end of any reported miss. Queue it before the event's publish, on
// the same pipeline, so no subscriber reading after its node subscribed
// can miss the event (see the package documentation). The returned
// command's Err says whether the entry was written, once p ran.
func (s *Store) QueueSet(ctx context.Context, p redis.Pipeliner, app, channel, event, data string) *redis.StatusCmd {
	set := p.Set(ctx, s.entry(app, channel), encode(event, data), s.ttl)
	p.Del(ctx, s.missed(app, channel))
	return set
}

// Fetch is a new subscriber's read of channel's cached event, counted as a
// hit or a miss. On a miss, report says whether this miss is the one to
// send to the cache_miss webhook; reportMisses is whether the app has one.
func (s *Store) Fetch(ctx context.Context, app, channel string, reportMisses bool) (e Entry, ok, report bool, err error) {
	window := int64(0)
	if reportMisses {
		window = MissReportWindow.Milliseconds()
	}
	res, err := fetchScript.Run(ctx, s.rdb, []string{s.entry(app, channel), s.missed(app, channel)}, window).Slice()
	if err != nil {
		s.misses.Inc()
		return Entry{}, false, false, fmt.Errorf("read cache of channel %q of app %q: %w", channel, app, err)
	}
	if len(res) == 1 {
		s.misses.Inc()
		return Entry{}, false, res[0] == int64(fetchReport), nil
	}
	e, err = entryOf(res)
	if err != nil {
		s.misses.Inc()
		return Entry{}, false, false, fmt.Errorf("read cache of channel %q of app %q: %w", channel, app, err)
	}
	s.hits.Inc()
	return e, true, false, nil
}

// Get reads channel's cached event without counting it (the HTTP API's
// info=cache); ok is false when nothing is cached.
func (s *Store) Get(ctx context.Context, app, channel string) (e Entry, ok bool, err error) {
	key := s.entry(app, channel)
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("read cache of channel %q of app %q: %w", channel, app, err)
	}
	e, err = decode(get.Val())
	if err != nil {
		return Entry{}, false, fmt.Errorf("read cache of channel %q of app %q: %w", channel, app, err)
	}
	e.TTL = max(pttl.Val(), 0)
	return e, true, nil
}

// entryOf decodes fetch.lua's {entry, pttl_ms}.
func entryOf(res []any) (Entry, error) {
	v, ok1 := res[0].(string)
	ms, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return Entry{}, fmt.Errorf("unexpected reply %v", res)
	}
	e, err := decode(v)
	if err != nil {
		return Entry{}, err
	}
	e.TTL = time.Duration(max(ms, 0)) * time.Millisecond
	return e, nil
}

// The stored form of an entry: the event name's length in decimal, ":",
// the event name, then the data. A length prefix needs no escaping of
// the data, which is itself JSON text, and no separator the name could
// contain.
func encode(event, data string) string {
	return strconv.Itoa(len(event)) + ":" + event + data
}

var errMalformed = errors.New("malformed cache entry")

func decode(v string) (Entry, error) {
	n, rest, ok := strings.Cut(v, ":")
	if !ok {
		return Entry{}, errMalformed
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 || l > len(rest) || strconv.Itoa(l) != n {
		return Entry{}, errMalformed
	}
	return Entry{Event: rest[:l], Data: rest[l:]}, nil
}
