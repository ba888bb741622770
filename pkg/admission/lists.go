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

	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/redis/go-redis/v9"
)

// ChannelState is one gated channel's state and what settling it changed.
type ChannelState struct {
	Channel string
	State
	Changes
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
			waiting[i] = p.ZCard(ctx, g.keys.channel(app, ch).Wait)
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
	var out []string
	err := keyspace.ScanPrefix(ctx, g.rdb, g.keys.gatePrefix(app), func(key string) {
		if ch, ok := g.keys.gatedChannel(app, key); ok {
			out = append(out, ch)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scan admission keys: %w", err)
	}
	// SCAN may return a key more than once, and a channel has several keys.
	slices.Sort(out)
	return slices.Compact(out), nil
}
