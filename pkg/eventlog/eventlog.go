package eventlog

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/keyspace"
)

// Event names: Pusher's webhooks, and headcount's own admission events.
const (
	ChannelOccupied   = "channel_occupied"
	ChannelVacated    = "channel_vacated"
	MemberAdded       = "member_added"
	MemberRemoved     = "member_removed"
	ClientEvent       = "client_event"
	SubscriptionCount = "subscription_count"
	CacheMiss         = "cache_miss"
	AdmissionAdmitted = "admission_admitted"
	AdmissionDropped  = "admission_dropped"
)

// MaxEntries caps every app's log, approximately (XADD MAXLEN ~), whatever
// its bytes: the bound on the events that are never refused. Every script
// that appends gets it as an argument.
const MaxEntries = 1_000_000

// Key names app's log in ks. Its entries have fields "t" (unix ms, Redis's
// clock), "ev" (the event as JSON) and "o" (the entry's byte offset, see
// scripts/lib.lua). It shares the app's hash tag, so the count scripts can
// append to it in the unit of a count change.
func Key(ks keyspace.Space, app string) string { return ks.App(app) + "events" }

// Lua is the Lua a script prepends to append to a log itself: log_open(key,
// max_entries) and log_add(handle, t, json), and now_ms(). The script
// declares the log's key in KEYS and passes MaxEntries in ARGV.
//
//go:embed scripts/lib.lua
var Lua string

var (
	//go:embed scripts/append.lua
	appendSrc string
	//go:embed scripts/bytes.lua
	bytesSrc string

	// Run with Run (EVALSHA, EVAL on NOSCRIPT), never in a pipeline.
	appendScript = redis.NewScript(Lua + appendSrc)
	bytesScript  = redis.NewScript(Lua + bytesSrc)
)

// Entry is one event for Append.
type Entry struct {
	// JSON is the event as its webhook will carry it.
	JSON string
	// Bounded events are refused when they would take the log past its
	// byte budget. Events that record a change already made elsewhere must
	// not be bounded: refusing them would lose their webhook silently.
	Bounded bool
}

// Log is one app's event log.
type Log struct {
	// App is the app's id.
	App string
	// Key is the log's Redis key.
	Key string
}

// For returns app's log in ks.
func For(ks keyspace.Space, app string) Log { return Log{App: app, Key: Key(ks, app)} }

// Append appends entries, in order, in one atomic script on the log's
// shard, and returns how many bounded entries it refused and the bytes the
// log holds afterwards.
//
// A log's bytes are the sizes of its entries' "t" and "ev" fields (the
// timestamp and the JSON), as the entries themselves record them, so
// trimming the log lowers them with no bookkeeping. A bounded entry is
// refused if appending it would take the log past budget bytes; budget <= 0
// means no byte bound. The check and the append are one atomic unit, so the
// budget holds however many nodes append at once: after a bounded append
// the log holds at most budget bytes. Unbounded entries (and the count
// scripts' occupancy events, which are never refused) are appended even
// past the budget and count toward it. Whatever the bytes, the log is
// capped at about MaxEntries entries.
func (l Log) Append(ctx context.Context, rdb redis.UniversalClient, budget int64, entries ...Entry) (refused int, bytes int64, err error) {
	if len(entries) == 0 {
		return 0, 0, nil
	}
	args := make([]any, 0, 2+2*len(entries))
	args = append(args, MaxEntries, max(budget, 0))
	for _, e := range entries {
		bounded := "0"
		if e.Bounded {
			bounded = "1"
		}
		args = append(args, bounded, e.JSON)
	}
	res, err := appendScript.Run(ctx, rdb, []string{l.Key}, args...).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("append to the event log of app %s: %w", l.App, err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("append to the event log of app %s: unexpected reply %v", l.App, res)
	}
	return int(res[0]), res[1], nil
}

// Bytes returns the bytes the log holds, as Append counts them: 0 for an
// empty or missing log.
func (l Log) Bytes(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	n, err := bytesScript.Run(ctx, rdb, []string{l.Key}).Int64()
	if err != nil {
		return 0, fmt.Errorf("read the size of the event log of app %s: %w", l.App, err)
	}
	return n, nil
}
