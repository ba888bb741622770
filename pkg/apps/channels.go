package apps

import "fmt"

// Channel caps: what one connection may subscribe to, and what one app
// may hold occupied at once.
const (
	// DefaultMaxChannelsPerConnection is a connection's channel cap when
	// the app sets none. Pusher sets no cap and soketi none, so the
	// default is one no real page meets (a dashboard or a trading screen
	// holds a few hundred), while what one anonymous socket can pin stays
	// bounded: about 0.9 KiB of node heap and 0.5 KiB of Redis per
	// channel it alone occupies (TestChannelMemory), about 0.9 MB and
	// 0.5 MB at the cap.
	DefaultMaxChannelsPerConnection = 1000
	// MaxChannelsPerConnectionLimit is the highest cap an app may set. A
	// socket's frame budget and send queue grow with its app's cap
	// (wsnode's frameBudget and queueLimits), so a socket on its cap can
	// re-send every subscribe at once and be sent one delivery per
	// channel at once.
	MaxChannelsPerConnectionLimit = 10_000
	// DefaultMaxChannels is an app's cap on occupied channels when it sets
	// none: about twice the largest app the scaling documents measure
	// (1,015,000 channels), so that app fits, while one app's channels
	// (and the Redis memory they take) stay bounded.
	DefaultMaxChannels = 2_000_000
)

// ChannelsPerConnection is the most channels one connection of the app may
// be subscribed to at once.
func (a *App) ChannelsPerConnection() int {
	if a.MaxChannelsPerConnection > 0 {
		return a.MaxChannelsPerConnection
	}
	return DefaultMaxChannelsPerConnection
}

// ChannelLimit is the most channels the app may hold occupied at once,
// cluster-wide, or 0 for no limit.
func (a *App) ChannelLimit() int {
	switch {
	case a.MaxChannels < 0:
		return 0
	case a.MaxChannels == 0:
		return DefaultMaxChannels
	}
	return a.MaxChannels
}

// validateChannels checks the channel caps.
func (a *App) validateChannels() []error {
	var errs []error
	if n := a.MaxChannelsPerConnection; n < 0 || n > MaxChannelsPerConnectionLimit {
		errs = append(errs, fmt.Errorf("app %q: maxChannelsPerConnection must be 0 (the default, %d) to %d, not %d",
			a.ID, DefaultMaxChannelsPerConnection, MaxChannelsPerConnectionLimit, n))
	}
	return errs
}
