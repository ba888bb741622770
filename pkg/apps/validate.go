package apps

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/protocol"
)

// keyPattern is what an app key may hold. pusher-js puts the key into its
// connect URL unescaped (/app/{key}?protocol=7...), and the server SDKs
// into "key:signature" auth values and into query strings: the URL's
// unreserved characters (RFC 3986: letters, digits, - . _ ~) pass all of
// them unchanged. They cover Pusher's keys (20 hex digits), soketi's
// (app-key) and Laravel Reverb's (random letters and digits). A "/" would
// put the key in two path segments, "?" or "#" end the path, "%" be
// decoded, ":" split the auth value, a space be refused by the browser.
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,128}$`)

// checkKey reports why key cannot be an app key.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("key is empty")
	case !keyPattern.MatchString(key):
		return fmt.Errorf("key %q must be 1-128 characters of A-Z a-z 0-9 - . _ ~ (pusher-js puts it unescaped in its URL, /app/{key})", key)
	case key == "." || key == "..":
		return fmt.Errorf("key %q is a dot segment, which browsers remove from /app/{key}", key)
	}
	return nil
}

// checkSecret reports why secret cannot sign anything.
func checkSecret(secret string) error {
	if strings.TrimSpace(secret) == "" {
		return fmt.Errorf("secret is empty or blank")
	}
	return nil
}

// checkEventTypes refuses a type no event has (eventlog.Names): a
// misspelt one would never be sent, with nothing to say why.
func checkEventTypes(types []string) []error {
	var errs []error
	for i, t := range types {
		if !slices.Contains(eventlog.Names, t) {
			errs = append(errs, fmt.Errorf("event_types[%d] %q is not an event type (known: %s)", i, t, strings.Join(eventlog.Names, ", ")))
		}
	}
	return errs
}

// MaxCapacity is the largest capacity a channel may have: the bound the
// apps file, the HTTP API's PUT .../capacity and package admission's
// scripts share. The admission scripts compute in Lua numbers, doubles
// exact up to 2^53 only, and Redis turns the numbers they return into
// 64-bit integers: 9223372036854775807 came back negative and the channel
// left the listing. A billion is far inside both, and far above the users
// one presence channel could hold (its members are one hash in Redis), so
// no real limit is refused.
const MaxCapacity = 1_000_000_000

// validateCapacities checks each capacities entry: a capacity
// admission's scripts hold exactly (MaxCapacity), and a prefix that only
// presence channels, the ones admission gates, can start with, given
// once: any other would limit nothing, silently.
func (a *App) validateCapacities() []error {
	var errs []error
	seen := map[string]int{}
	for i, c := range a.Capacities {
		field := fmt.Sprintf("app %q: capacities[%d] (prefix %q)", a.ID, i, c.Prefix)
		if c.Capacity < 1 || c.Capacity > MaxCapacity {
			errs = append(errs, fmt.Errorf("%s: capacity must be 1 to %d (MaxCapacity), not %d", field, MaxCapacity, c.Capacity))
		}
		if j, dup := seen[c.Prefix]; dup {
			errs = append(errs, fmt.Errorf("%s: the same prefix as capacities[%d]; give each prefix once", field, j))
		}
		seen[c.Prefix] = i
		switch {
		case !protocol.ChannelKind(c.Prefix).HasMembers():
			errs = append(errs, fmt.Errorf("%s: not a presence channel's prefix: capacities apply to presence channels only, so start it with %s", field, protocol.PresencePrefix))
		case protocol.ValidateChannelNameMax(c.Prefix, a.ChannelNameLimit()) != nil:
			errs = append(errs, fmt.Errorf("%s: no channel name starts so: %w", field, protocol.ValidateChannelNameMax(c.Prefix, a.ChannelNameLimit())))
		}
	}
	return errs
}

// Bounds of a history entry (History): what one channel's stream holds at
// most, and how long.
const (
	MaxHistoryEvents  = 10_000
	MaxHistorySeconds = 86_400
)

// validateHistory checks each history entry: its bounds, a prefix given
// once, and a prefix some channel that may have a history
// (protocol.KeepsHistory) starts with: any other would keep nothing,
// silently.
func (a *App) validateHistory() []error {
	var errs []error
	seen := map[string]int{}
	for i, h := range a.History {
		field := fmt.Sprintf("app %q: history[%d] (prefix %q)", a.ID, i, h.Prefix)
		if h.Events < 1 || h.Events > MaxHistoryEvents {
			errs = append(errs, fmt.Errorf("%s: events must be 1 to %d, not %d", field, MaxHistoryEvents, h.Events))
		}
		if h.Seconds < 1 || h.Seconds > MaxHistorySeconds {
			errs = append(errs, fmt.Errorf("%s: seconds must be 1 to %d, not %d", field, MaxHistorySeconds, h.Seconds))
		}
		if h.Rewind < 0 || h.Rewind > h.Events {
			errs = append(errs, fmt.Errorf("%s: rewind must be 0 to events (%d), not %d", field, h.Events, h.Rewind))
		}
		if j, dup := seen[h.Prefix]; dup {
			errs = append(errs, fmt.Errorf("%s: the same prefix as history[%d]; give each prefix once", field, j))
		}
		seen[h.Prefix] = i
		switch {
		case protocol.ValidateChannelNameMax(h.Prefix, a.ChannelNameLimit()) != nil:
			errs = append(errs, fmt.Errorf("%s: no channel name starts so: %w", field, protocol.ValidateChannelNameMax(h.Prefix, a.ChannelNameLimit())))
		case !protocol.KeepsHistory(h.Prefix):
			errs = append(errs, fmt.Errorf("%s: only names channels without a history: user (%s), internal and cache channels keep none (cache channels keep their last event their own way)", field, protocol.UserChannelPrefix))
		}
	}
	return errs
}

// HistoryFor returns the history rule of channel, by the longest matching
// prefix; the zero History (Events 0) when it has none, always for a
// channel that cannot have a history (protocol.KeepsHistory).
func (a *App) HistoryFor(channel string) History {
	if len(a.History) == 0 || !protocol.KeepsHistory(channel) {
		return History{}
	}
	h, _ := Longest(a.History, func(h History) string { return h.Prefix }, channel)
	return h
}
