package admission

import (
	"strings"

	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
)

// Every key of a channel's gate carries the app's hash tag, like counts'
// keys, so each script (which also reads counts' member hash) is
// single-slot on Redis Cluster. This file is the only place that spells
// them: "<prefix>:{<app>}:adm:<kind>:<channel>".
type keys struct{ ks keyspace.Space }

// The kinds of gate key; one in gatedKinds exists while its channel is
// gated (see gatedChannel).
const (
	kindCap   = "cap:"
	kindSlots = "slots:"
	kindWait  = "wait:"
	kindSeen  = "seen:"
	kindSeq   = "seq:"
	kindGrace = "grace:"
	kindHold  = "hold:"
)

// gatePrefix starts every gate key of app.
func (k keys) gatePrefix(app string) string { return k.ks.App(app) + "adm:" }

// channelKeys are the keys of one channel's gate (scripts/lib.lua says what
// each holds).
type channelKeys struct {
	Cap, Slots, Wait, Seen, Seq string
	// Members is counts' member hash of the channel, read only.
	Members     string
	Grace, Hold string
	// Complete is counts' time from which Members holds every live
	// node's members (counts.CompleteKey), read only.
	Complete string
}

func (k keys) channel(app, channel string) channelKeys {
	p := k.gatePrefix(app)
	return channelKeys{
		Cap:     p + kindCap + channel,
		Slots:   p + kindSlots + channel,
		Wait:    p + kindWait + channel,
		Seen:    p + kindSeen + channel,
		Seq:     p + kindSeq + channel,
		Members: counts.MembersKey(k.ks, app, channel),
		Grace:   p + kindGrace + channel,
		Hold:    p + kindHold + channel,
		// Complete is the app's, not the channel's.
		Complete: counts.CompleteKey(k.ks, app),
	}
}

// scriptKeys are the keys in the order of every script's KEYS (the K table
// of scripts/lib.lua); Gate.run appends the reaps' (counts.ReapKeys).
func (c channelKeys) scriptKeys() []string {
	return []string{c.Cap, c.Slots, c.Wait, c.Seen, c.Seq, c.Members, c.Grace, c.Hold, c.Complete}
}

// gatedKinds are the keys whose presence means a channel is gated right
// now: an override, admitted users or waiters. (The arrival counter
// outlives its list, so it is not one of them; nor are holds, which every
// presence channel has for a grace after a join, for its member limit.)
var gatedKinds = []string{kindCap, kindSlots, kindWait}

// gatedChannel returns the channel of one of app's gate keys, if the key is
// one that makes its channel gated.
func (k keys) gatedChannel(app, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, k.gatePrefix(app))
	if !ok {
		return "", false
	}
	for _, kind := range gatedKinds {
		if ch, ok := strings.CutPrefix(rest, kind); ok && ch != "" {
			return ch, true
		}
	}
	return "", false
}
