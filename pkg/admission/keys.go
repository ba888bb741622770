package admission

import "github.com/headcount/headcount/pkg/counts"

// Every key of a channel's gate carries the app's hash tag, like counts'
// keys, so each script (which also reads counts' member hash) is
// single-slot on Redis Cluster. This file is the only place that spells them.
func channelKeys(app, channel string) []string {
	p := "hc:{" + app + "}:adm:"
	return []string{
		p + "cap:" + channel,
		p + "slots:" + channel,
		p + "wait:" + channel,
		p + "seen:" + channel,
		p + "seq:" + channel,
		counts.MembersKey(app, channel),
		p + "grace:" + channel,
		p + "hold:" + channel,
	}
}

// capKey is the per-channel capacity override (the first of channelKeys).
func capKey(app, channel string) string { return channelKeys(app, channel)[0] }
