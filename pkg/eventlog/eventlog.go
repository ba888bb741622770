package eventlog

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/keyspace"
)

// Event names: Pusher's webhooks, and headcount's own admission events and
// EventsDropped.
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
	// EventsDropped is the notice logged before the first event let in
	// after the byte budget refused some: {"name":"events_dropped",
	// "channel":"","dropped":N,"since_ms":T}.
	EventsDropped = "events_dropped"
)

// Names are every event name a log carries: the event types a webhook may
// ask for.
var Names = []string{ChannelOccupied, ChannelVacated, MemberAdded, MemberRemoved, ClientEvent,
	SubscriptionCount, CacheMiss, AdmissionAdmitted, AdmissionDropped, EventsDropped}

// MaxEntries caps every app's log, approximately (XADD MAXLEN ~), whatever
// its bytes. Every script that appends gets it as an argument.
const MaxEntries = 1_000_000

// Key names app's log in ks. Its entries have fields "t" (unix ms, Redis's
// clock), "ev" (the event as JSON), "o" (the entry's byte offset) and, on a
// marker, "k" (its kind); scripts/lib.lua says what each means. It shares
// the app's hash tag, so the count scripts can append to it in the unit of
// a count change.
func Key(ks keyspace.Space, app string) string { return ks.App(app) + "events" }

// IndexKey names the index of app's log in ks: the unclaimed markers and
// the count of refused events (scripts/lib.lua). The scripts derive it from
// the log's key, so it is that key and a suffix.
func IndexKey(ks keyspace.Space, app string) string { return Key(ks, app) + "-index" }

// Spec says what a count script logs to an app's event log: the marker
// events some webhook of the app asks for, held to a byte budget. The
// zero Spec logs nothing.
type Spec struct {
	// Names are the marker events to log: ChannelOccupied, ChannelVacated,
	// MemberAdded, MemberRemoved, SubscriptionCount.
	Names []string
	// Budget is the byte budget of the log (see Log.Append); 0: none.
	Budget int64
}

// Logs reports whether s logs anything.
func (s Spec) Logs() bool { return len(s.Names) > 0 }

// Arg packs s into the one argument a count script takes for it, which
// log_spec in scripts/lib.lua reads: "" for nothing, else "<MaxEntries>
// <budget> <name>,<name>...".
func (s Spec) Arg() string {
	if !s.Logs() {
		return ""
	}
	return strconv.Itoa(MaxEntries) + " " + strconv.FormatInt(max(s.Budget, 0), 10) + " " + strings.Join(s.Names, ",")
}

// Log is one app's event log.
type Log struct {
	// App is the app's id.
	App string
	// Key is the log's Redis key, and Index its index's.
	Key, Index string
}

// For returns app's log in ks.
func For(ks keyspace.Space, app string) Log {
	return Log{App: app, Key: Key(ks, app), Index: IndexKey(ks, app)}
}

// Append appends events (each as its JSON), in order, in one atomic script
// on the log's shard, and returns how many it refused and the bytes the log
// holds afterwards.
//
// A log's bytes are the sizes of its entries' "t" and "ev" fields (the
// timestamp and the JSON), as the entries themselves record them, so
// trimming the log lowers them with no bookkeeping. An event is refused if
// appending it would take the log past budget bytes (budget <= 0: no byte
// bound), and the refusal is counted in the log's index; the next event
// let in is preceded by an EventsDropped notice. The check and the append
// are one atomic unit, so the budget holds however many processes append
// at once, the count scripts' markers and the notices included: a log
// never holds more than its budget. Whatever the bytes, the log is capped
// at about MaxEntries entries.
func (l Log) Append(ctx context.Context, rdb redis.UniversalClient, budget int64, events ...string) (refused int, bytes int64, err error) {
	if len(events) == 0 {
		return 0, 0, nil
	}
	args := make([]any, 0, 2+len(events))
	args = append(args, MaxEntries, max(budget, 0))
	for _, e := range events {
		args = append(args, e)
	}
	res, err := appendScript.Run(ctx, rdb, []string{l.Key, l.Index}, args...).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("append to the event log of app %s: %w", l.App, err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("append to the event log of app %s: unexpected reply %v", l.App, res)
	}
	return int(res[0]), res[1], nil
}

// Stats is what a log holds and what its budget refused.
type Stats struct {
	// Bytes are the bytes the log holds, as Append counts them.
	Bytes int64
	// Dropped counts the events the budget refused since the log's index
	// was created; Untold those no EventsDropped notice has told yet, the
	// first of them at UntoldSince.
	Dropped, Untold int64
	UntoldSince     time.Time
}

// Stats reads the log's Stats: zero for an empty or missing log.
func (l Log) Stats(ctx context.Context, rdb redis.UniversalClient) (Stats, error) {
	v, err := bytesScript.Run(ctx, rdb, []string{l.Key, l.Index}).Int64Slice()
	if err == nil && len(v) != 4 {
		err = fmt.Errorf("unexpected reply %v", v)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("read the size of the event log of app %s: %w", l.App, err)
	}
	s := Stats{Bytes: v[0], Dropped: v[1], Untold: v[2]}
	if v[3] > 0 {
		s.UntoldSince = time.UnixMilli(v[3])
	}
	return s, nil
}

// Kinds of marker, the "k" field of a marker entry (scripts/lib.lua).
const (
	KindOccupancy byte = 'o' // channel_occupied, channel_vacated
	KindMember    byte = 'm' // member_added, member_removed
	KindCount     byte = 's' // subscription_count
)

// Tell logs the EventsDropped notice of the refusals not told yet on its
// own, if there are any and it fits in budget, and reports whether it did:
// an event let in tells them too, but after a burst nothing may follow,
// and a receiver must learn of the gap all the same.
func (l Log) Tell(ctx context.Context, rdb redis.UniversalClient, budget int64) (bool, error) {
	n, err := tellScript.Run(ctx, rdb, []string{l.Key, l.Index}, MaxEntries, max(budget, 0)).Int64()
	if err != nil {
		return false, fmt.Errorf("tell of the events the log of app %s dropped: %w", l.App, err)
	}
	return n == tellLogged, nil
}

// Marker is a marker entry of the log (scripts/lib.lua) a deliverer is
// about to post.
type Marker struct {
	// ID is the entry's id; Kind its "k" field.
	ID   string
	Kind byte
	// Name, Channel and UserID are its event's.
	Name, Channel, UserID string
	// Members is the key of the channel's member hash (counts.MembersKey)
	// for a member marker, else "".
	Members string
}

// Claim results other than a count (see claim.lua).
const (
	ClaimGone     = "x" // no longer in the log: post nothing
	ClaimDeferred = "d" // logged again after the channel's occupancy change: post nothing now
	ClaimPost     = "1" // the state is still the one the event names: post it
	ClaimUndone   = "0" // the change was undone meanwhile: post nothing
)

// Claim claims markers about to be posted, in one atomic script, and
// returns what each says now (one of the Claim results, or for a
// subscription count marker the channel's count as a decimal, "0" meaning
// vacated): the state of its channel or member in channels (the app's
// counts, counts.ChannelsKey) and the member hashes, so a marker tells the
// state its changes left, however many there were. A claimed marker's
// later changes log a new marker. budget is the log's byte budget, which
// holds for the copies a deferral logs.
func (l Log) Claim(ctx context.Context, rdb redis.UniversalClient, budget int64, channels string, markers []Marker) ([]string, error) {
	keys := []string{l.Key, l.Index, channels}
	args := make([]any, 0, 2+6*len(markers))
	args = append(args, MaxEntries, max(budget, 0))
	seen := map[string]bool{}
	for _, m := range markers {
		args = append(args, m.ID, string(m.Kind), m.Name, m.Channel, m.UserID, m.Members)
		if m.Members != "" && !seen[m.Members] {
			seen[m.Members] = true
			keys = append(keys, m.Members)
		}
	}
	out, err := claimScript.Run(ctx, rdb, keys, args...).StringSlice()
	if err == nil && len(out) != len(markers) {
		err = fmt.Errorf("unexpected reply %v", out)
	}
	if err != nil {
		return nil, fmt.Errorf("claim markers of the event log of app %s: %w", l.App, err)
	}
	return out, nil
}

// Sweep forgets up to about n index slots whose marker was trimmed before
// any deliverer claimed it, from HSCAN cursor (0 to start), and returns the
// next cursor (0 when a pass is done).
func (l Log) Sweep(ctx context.Context, rdb redis.UniversalClient, cursor uint64, n int) (uint64, error) {
	v, err := sweepScript.Run(ctx, rdb, []string{l.Key, l.Index}, cursor, n).Slice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("unexpected reply %v", v)
	}
	if err != nil {
		return 0, fmt.Errorf("sweep the index of the event log of app %s: %w", l.App, err)
	}
	s, _ := v[0].(string)
	next, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sweep the index of the event log of app %s: cursor %v: %w", l.App, v[0], err)
	}
	return next, nil
}
