package admission

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/luascript"
	"github.com/headcount/headcount/pkg/protocol"
)

// Defaults of the apps file's admission timings (README, Admission).
const (
	DefaultDropout = 30 * time.Second
	DefaultGrace   = 10 * time.Second
	DefaultTicket  = 30 * time.Second
	// MaxUserIDLength matches the presence limit: a user who could never
	// subscribe is refused a place.
	MaxUserIDLength = 128
	// DefaultMaxMembers is a presence channel's member limit when the app
	// sets no maxPresenceMembersPerChannel: Pusher's documented limit.
	DefaultMaxMembers = 100
)

// Rule is what the apps file says about one channel: its capacity by the
// longest matching prefix (0: no limit, unless the HTTP API set one for the
// channel), its member limit and the app's timings. The gate seats the
// smaller of the capacity and the member limit, with a waiting list only
// when there is a capacity (scripts/lib.lua, seats).
type Rule struct {
	Capacity int
	// Members is the most distinct users the channel may have (0: none).
	Members int
	Ticket  time.Duration // an admitted user's slot lasts this long unless used
	Grace   time.Duration // a member who left keeps the slot this long; a subscribe holds its seat this long
	Dropout time.Duration // a waiter silent this long is struck from the list
}

// RuleFor resolves app's rule for channel.
func RuleFor(app *apps.App, channel string) Rule {
	r := Rule{Members: DefaultMaxMembers, Ticket: DefaultTicket, Grace: DefaultGrace, Dropout: DefaultDropout}
	if app.MaxPresenceMembersPerChannel > 0 {
		r.Members = app.MaxPresenceMembersPerChannel
	}
	if c, ok := apps.Longest(app.Capacities, func(c apps.Capacity) string { return c.Prefix }, channel); ok {
		r.Capacity = c.Capacity
	}
	seconds := func(n int, d *time.Duration) {
		if n > 0 {
			*d = time.Duration(n) * time.Second
		}
	}
	seconds(app.Admission.TicketSeconds, &r.Ticket)
	seconds(app.Admission.GraceSeconds, &r.Grace)
	seconds(app.Admission.DropoutSeconds, &r.Dropout)
	return r
}

// Limited reports whether the apps file may limit channel at all: only
// presence channels count distinct users, so only they are gated.
func Limited(channel string) bool { return protocol.ChannelKind(channel).HasMembers() }

// args are every script's ARGV (scripts/lib.lua).
func (r Rule) args(user string) []any {
	return []any{user, r.Capacity, r.Ticket.Milliseconds(), r.Grace.Milliseconds(), r.Dropout.Milliseconds(), r.Members}
}

// Status is the outcome of a Check.
type Status int

const (
	// Unlimited means the channel has no capacity; everyone is admitted.
	Unlimited Status = iota
	// Admitted means the user holds a slot.
	Admitted
	// Waiting means the user is on the waiting list.
	Waiting
)

// Changes are what a script did besides answering: users it admitted from
// the head of the list, waiters it struck for silence and slots it freed
// (tickets not used in time, leavers past their grace). Callers announce
// them (metrics, webhooks, a notice to the nodes holding waiters) through
// package announce.
type Changes struct {
	Promoted, Dropped, Freed []string
}

// Moved reports whether anyone's position or slot may have changed.
func (c Changes) Moved() bool { return len(c.Promoted)+len(c.Dropped)+len(c.Freed) > 0 }

// State is a channel's gate as GET .../admission shows it.
type State struct {
	Capacity, Occupancy, Waiting int
}

// Result answers a Check.
type Result struct {
	Status Status
	// ExpiresIn: how long an Admitted user's slot lasts unless they
	// subscribe (or check in again).
	ExpiresIn time.Duration
	// New: admitted by this call, without waiting.
	New bool
	// Position on the list (1 for the head) when Waiting.
	Position int
	State
	Changes
}

// Gate is the atomic admission gate of capacity-limited channels. Every
// operation is one Lua script over the channel's keys (one slot) timed by
// Redis's clock, so any number of httpapi replicas and wsnodes share one
// exact gate.
type Gate struct {
	rdb  redis.UniversalClient
	keys keys
}

// New returns a gate on rdb whose keys are in ks.
func New(rdb redis.UniversalClient, ks keyspace.Space) *Gate { return &Gate{rdb: rdb, keys: keys{ks}} }

// ErrNoCapacity is returned by SetCapacity for n < 1 or n > apps.MaxCapacity.
var ErrNoCapacity = fmt.Errorf("capacity must be 1 to %d", apps.MaxCapacity)

// ErrFull is returned by Join when a channel without a waiting list (the
// member limit alone limits it) has no free seat.
var ErrFull = errors.New("the channel is at its member limit")

// IncompleteError is returned by Join while the channel's members may not
// hold every live node's (Redis lost its data, or is new, and the nodes
// are republishing): a seat that looks free may be a member's. Retry
// after Wait (0: unknown, soon).
type IncompleteError struct{ Wait time.Duration }

func (e *IncompleteError) Error() string {
	return "the channel's members are being restored; retry in " + e.Wait.String()
}

// Check admits user if there is room and nobody waits, else puts them on
// the list (or, if they are on it, checks them in and tells their place).
// One Redis round trip.
func (g *Gate) Check(ctx context.Context, app, channel, user string, r Rule) (Result, error) {
	reply, err := g.run(ctx, checkScript, app, channel, r.args(user)...)
	v, _ := reply.([]any)
	if err != nil {
		return Result{}, fmt.Errorf("admission check: %w", err)
	}
	if len(v) != 8 {
		return Result{}, fmt.Errorf("admission check: unexpected reply %v", v)
	}
	res := Result{State: State{Waiting: toInt(v[2]), Capacity: toInt(v[3]), Occupancy: toInt(v[4])}, Changes: changes(v[5:8])}
	switch v[0] {
	case statusUnlimited:
		res.Status = Unlimited
	case statusAdmitted, statusAdmittedNow:
		res.Status, res.ExpiresIn, res.New = Admitted, time.Duration(toInt(v[1]))*time.Millisecond, v[0] == statusAdmittedNow
	case statusWaiting:
		res.Status, res.Position = Waiting, toInt(v[1])
	default:
		return Result{}, fmt.Errorf("admission check: unexpected status %v", v[0])
	}
	return res, nil
}

// Leave (DELETE .../admission) takes user off the list and gives up their
// slot, and admits the head of the list if that made room. It frees no
// seat of a user in the channel: a member keeps theirs until their last
// socket leaves (then without a grace), and a subscribe being recorded
// keeps its hold (see Join).
func (g *Gate) Leave(ctx context.Context, app, channel, user string, r Rule) (State, Changes, error) {
	return g.settled(ctx, leaveScript, "leave", app, channel, user, r)
}

// State returns the channel's gate, first freeing what has expired and
// admitting waiters into the room that made.
func (g *Gate) State(ctx context.Context, app, channel string, r Rule) (State, Changes, error) {
	return g.settled(ctx, stateScript, "state", app, channel, "", r)
}

func (g *Gate) settled(ctx context.Context, s *luascript.Script, op, app, channel, user string, r Rule) (State, Changes, error) {
	res, err := g.run(ctx, s, app, channel, r.args(user)...)
	v, _ := res.([]any)
	if err != nil {
		return State{}, Changes{}, fmt.Errorf("admission %s: %w", op, err)
	}
	if len(v) != 6 {
		return State{}, Changes{}, fmt.Errorf("admission %s: unexpected reply %v", op, v)
	}
	return State{Capacity: toInt(v[0]), Occupancy: toInt(v[1]), Waiting: toInt(v[2])}, changes(v[3:6]), nil
}

// SetCapacity overrides the channel's capacity (1 to apps.MaxCapacity), then
// admits waiters if it grew. Lowering it evicts nobody: it only admits
// fewer.
func (g *Gate) SetCapacity(ctx context.Context, app, channel string, n int, r Rule) (State, Changes, error) {
	if n < 1 || n > apps.MaxCapacity {
		return State{}, Changes{}, ErrNoCapacity
	}
	if err := g.rdb.Set(ctx, g.keys.channel(app, channel).Cap, n, 0).Err(); err != nil {
		return State{}, Changes{}, fmt.Errorf("admission set capacity: %w", err)
	}
	return g.State(ctx, app, channel, r)
}

// ClearCapacity removes the override: the apps file's rule applies again.
func (g *Gate) ClearCapacity(ctx context.Context, app, channel string, r Rule) (State, Changes, error) {
	if err := g.rdb.Del(ctx, g.keys.channel(app, channel).Cap).Err(); err != nil {
		return State{}, Changes{}, fmt.Errorf("admission clear capacity: %w", err)
	}
	return g.State(ctx, app, channel, r)
}

// Join is the WebSocket gate of every presence channel: it reports whether
// user may subscribe to channel and, if not, their place on the list (0:
// not on it). A member (another socket), a user held by another subscribe
// and, on a listed channel, the holder of an unexpired slot pass; on a
// channel with the member limit alone (no capacity) anyone passes while
// a seat is free, first come first served, and past it Join returns
// ErrFull. A user let in has their seat held for r.Grace: the caller must
// record the member (its counts flush) within that time, and until the hold
// ends nothing frees the seat. reentry is true when a member who left came
// back within the grace. Anyone else gets an *IncompleteError while the
// members may not hold every live node's (counts.CompleteKey): none has
// registered since Redis's data began, or they are republishing. One
// round trip; the script's work grows with the channel's seats, never
// with the app.
func (g *Gate) Join(ctx context.Context, app, channel, user string, r Rule) (ok, reentry bool, position, waiting int, err error) {
	res, err := g.run(ctx, joinScript, app, channel, r.args(user)...)
	v, _ := res.([]any)
	if err != nil {
		return false, false, 0, 0, fmt.Errorf("admission join: %w", err)
	}
	if len(v) != 4 {
		return false, false, 0, 0, fmt.Errorf("admission join: unexpected reply %v", v)
	}
	switch toInt(v[3]) {
	case joinFull:
		return false, false, 0, 0, ErrFull
	case joinIncomplete:
		return false, false, 0, 0, &IncompleteError{Wait: time.Duration(toInt(v[2])) * time.Millisecond}
	}
	return toInt(v[0]) == 1, toInt(v[1]) == 1, toInt(v[2]), toInt(v[3]), nil
}

// Left starts user's grace on channel: their last socket left it, cluster
// wide. Without a call (a lost edge), the slot is freed at its expiry. It
// reports whether the user held a slot, which then frees after r.Grace
// unless they come back.
func (g *Gate) Left(ctx context.Context, app, channel, user string, r Rule) (bool, error) {
	res, err := g.run(ctx, leftScript, app, channel, r.args(user)...)
	if err != nil {
		return false, fmt.Errorf("admission left: %w", err)
	}
	kept, ok := res.(int64)
	if !ok {
		return false, fmt.Errorf("admission left: unexpected reply %v", res)
	}
	return kept == leftKept, nil
}

// run runs s over channel's keys and the reaps under way of app, whose
// members hold no seat (counts.Exactly), and returns its reply.
func (g *Gate) run(ctx context.Context, s *luascript.Script, app, channel string, args ...any) (any, error) {
	own := g.keys.channel(app, channel).scriptKeys()
	return counts.Exactly(nil, func(reaps []string) (any, error) {
		return s.Run(ctx, g.rdb, slices.Concat(own, counts.ReapKeys(g.keys.ks, app, reaps)), args...).Result()
	})
}

// WaiterState is where one connected waiter stands after CheckIn.
type WaiterState struct {
	Admitted  bool
	ExpiresIn time.Duration // when Admitted
	Position  int           // when waiting; 0 when no longer on the list
}

// CheckIn checks in users (waiters connected to a wsnode, who must not
// drop out while connected), settles the gate and returns each one's state
// in order.
func (g *Gate) CheckIn(ctx context.Context, app, channel string, users []string, r Rule) (State, Changes, []WaiterState, error) {
	args := r.args("")
	for _, u := range users {
		args = append(args, u)
	}
	res, err := g.run(ctx, waitersScript, app, channel, args...)
	v, _ := res.([]any)
	if err != nil {
		return State{}, Changes{}, nil, fmt.Errorf("admission check-in: %w", err)
	}
	if len(v) != 7 {
		return State{}, Changes{}, nil, fmt.Errorf("admission check-in: unexpected reply %v", v)
	}
	raw, _ := v[6].([]any)
	if len(raw) != len(users) {
		return State{}, Changes{}, nil, fmt.Errorf("admission check-in: %d states for %d users", len(raw), len(users))
	}
	states := make([]WaiterState, len(users))
	for i, s := range raw {
		if str, ok := s.(string); ok && strings.HasPrefix(str, statusAdmitted) {
			ms, _ := strconv.ParseInt(str[1:], 10, 64)
			states[i] = WaiterState{Admitted: true, ExpiresIn: time.Duration(ms) * time.Millisecond}
			continue
		}
		states[i].Position = toInt(s)
	}
	return State{Capacity: toInt(v[0]), Occupancy: toInt(v[1]), Waiting: toInt(v[2])}, changes(v[3:6]), states, nil
}

// Ticket is the opaque proof of admission in the HTTP answer: an HMAC of the
// channel, the user and the slot's expiry under the app's secret.
func Ticket(secret, channel, user string, expires time.Time) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%s\n%s\n%d", channel, user, expires.UnixMilli())
	return hex.EncodeToString(m.Sum(nil))[:32]
}

func changes(v []any) Changes {
	list := func(x any) []string {
		l, _ := x.([]any)
		out := make([]string, 0, len(l))
		for _, u := range l {
			if s, ok := u.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return Changes{Promoted: list(v[0]), Dropped: list(v[1]), Freed: list(v[2])}
}

func toInt(v any) int {
	switch n := v.(type) {
	case int64:
		return int(n)
	case string:
		i, _ := strconv.Atoi(n)
		return i
	}
	return 0
}
