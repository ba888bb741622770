package admission

// lists.go: every gated channel of an app with its state, for an operator's
// dashboard (GET /apps/{app_id}/admission). Finding the channels is a SCAN
// of the app's shard; each listed channel's state is then the same script
// as GET .../admission.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ChannelState is one gated channel's state and what settling it changed.
type ChannelState struct {
	Channel string
	State
	Changes
}

// Gate keys whose presence means a channel is gated right now: an override,
// admitted users, waiters, or seats held by subscribes being recorded. (The
// arrival counter outlives its list, so it is not one of them.)
const (
	capIndex   = 0
	slotsIndex = 1
	waitIndex  = 2
	holdIndex  = 7
)

var gatedKeyIndexes = []int{capIndex, slotsIndex, waitIndex, holdIndex}

// gateKeyPrefix is what the gated keys of every channel of app start with:
// the common prefix of their names for the empty channel (keys.go spells them).
func gateKeyPrefix(app string) string {
	keys := channelKeys(app, "")
	p := keys[gatedKeyIndexes[0]]
	for _, i := range gatedKeyIndexes[1:] {
		for !strings.HasPrefix(keys[i], p) {
			p = p[:len(p)-1]
		}
	}
	return p
}

// gateKeyPattern is a SCAN MATCH pattern for app's admission keys. The app
// id is escaped: it is matched literally, whatever glob characters it holds.
func gateKeyPattern(app string) string { return globEscape(gateKeyPrefix(app)) + "*" }

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// gatedChannel returns the channel of one of app's admission keys, if the
// key is one that makes its channel gated.
func gatedChannel(app, key string) (string, bool) {
	empty := channelKeys(app, "")
	for _, i := range gatedKeyIndexes {
		if ch, ok := strings.CutPrefix(key, empty[i]); ok && ch != "" {
			return ch, true
		}
	}
	return "", false
}

// scanner is the one command Lists needs from a client that reaches the
// app's shard.
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
}

// Lists returns up to limit gated channels of app (a capacity override, an
// admitted user or a waiter), the longest waiting lists first (then by
// name), each settled and read as State does; rule gives each channel's
// rule. A channel whose capacity turns out to be none is left out. Cost:
// SCAN of the app's shard (O(keys of that shard) in short commands), one
// pipelined ZCARD per gated channel, and one state script per channel
// returned. The caller reports each channel's Changes as after State.
func (g *Gate) Lists(ctx context.Context, app string, limit int, rule func(channel string) Rule) ([]ChannelState, error) {
	channels, err := g.gatedChannels(ctx, app)
	if err != nil {
		return nil, fmt.Errorf("admission lists of app %s: %w", app, err)
	}
	if len(channels) == 0 {
		return nil, nil
	}
	waiting := make([]*redis.IntCmd, len(channels))
	_, err = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, ch := range channels {
			waiting[i] = p.ZCard(ctx, channelKeys(app, ch)[waitIndex])
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("admission lists of app %s: %w", app, err)
	}
	order := make([]int, len(channels))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(waiting[b].Val(), waiting[a].Val()), cmp.Compare(channels[a], channels[b]))
	})
	var out []ChannelState
	for _, i := range order {
		if len(out) == limit {
			break
		}
		st, c, err := g.State(ctx, app, channels[i], rule(channels[i]))
		if err != nil {
			return nil, fmt.Errorf("admission lists of app %s: %w", app, err)
		}
		if st.Capacity > 0 {
			out = append(out, ChannelState{Channel: channels[i], State: st, Changes: c})
		}
	}
	// Settling may have moved waiters: order by what is true now.
	slices.SortStableFunc(out, func(a, b ChannelState) int { return cmp.Compare(b.Waiting, a.Waiting) })
	return out, nil
}

// gatedChannels lists app's gated channels, sorted, by SCAN on the shard
// holding the app's slot.
func (g *Gate) gatedChannels(ctx context.Context, app string) ([]string, error) {
	var sc scanner = g.rdb
	if c, ok := g.rdb.(*redis.ClusterClient); ok {
		// A key-less SCAN would go to a random master.
		m, err := c.MasterForKey(ctx, gateKeyPrefix(app))
		if err != nil {
			return nil, fmt.Errorf("find the shard of app %s: %w", app, err)
		}
		sc = m
	}
	var out []string
	var cursor uint64
	for {
		keys, next, err := sc.Scan(ctx, cursor, gateKeyPattern(app), 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("scan admission keys: %w", err)
		}
		for _, k := range keys {
			if ch, ok := gatedChannel(app, k); ok {
				out = append(out, ch)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	// SCAN may return a key more than once, and a channel has several keys.
	slices.Sort(out)
	return slices.Compact(out), nil
}
