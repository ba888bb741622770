package protocol

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MaxChannelNameLength is the longest channel name accepted unless an app
// sets its own (apps' maxChannelNameLength). Pusher's docs
// say 164, but pusher-http-go, pusher-http-node and soketi all allow 200,
// and apps built on them use it.
const MaxChannelNameLength = 200

var channelNamePattern = regexp.MustCompile(`^[-a-zA-Z0-9_=@,.;]+$`)

// Kind is what a channel's name prefix makes it. Every rule that depends
// on a channel's kind is a method here, so a prefix is tested in this file
// only.
type Kind uint8

// Channel kinds, decided by name prefix.
const (
	KindPublic    Kind = iota
	KindPrivate        // private-
	KindEncrypted      // private-encrypted-
	KindPresence       // presence-
	KindUser           // #server-to-user-{id}
	KindInternal       // #headcount- (InternalPrefix): the server's own
)

// Name prefixes of the kinds. A cache channel is any kind whose name goes
// on with "cache-" (cache-, private-cache-, private-encrypted-cache-,
// presence-cache-).
const (
	PresencePrefix    = "presence-"
	privatePrefix     = "private-"
	encryptedPrefix   = "private-encrypted-"
	UserChannelPrefix = "#server-to-user-" // the channel a signed-in user receives events on
	cachePart         = "cache-"
)

// ChannelKind returns the kind of a (valid) channel name.
func ChannelKind(name string) Kind {
	switch {
	case strings.HasPrefix(name, encryptedPrefix):
		return KindEncrypted
	case strings.HasPrefix(name, privatePrefix):
		return KindPrivate
	case strings.HasPrefix(name, PresencePrefix):
		return KindPresence
	case strings.HasPrefix(name, UserChannelPrefix):
		return KindUser
	case strings.HasPrefix(name, InternalPrefix):
		return KindInternal
	}
	return KindPublic
}

// String is the kind's name in logs and errors.
func (k Kind) String() string {
	switch k {
	case KindPrivate:
		return "private"
	case KindEncrypted:
		return "private-encrypted"
	case KindPresence:
		return "presence"
	case KindUser:
		return "user"
	case KindInternal:
		return "internal"
	}
	return "public"
}

// Counted reports whether the channel's subscriptions are counted in
// Redis. A user channel is not: it is not a channel an application
// subscribes to but where the server reaches a signed-in user. Nor is an
// internal one: SignedInChannel has members only, so it never appears in
// listings, counts or occupancy webhooks.
func (k Kind) Counted() bool { return k != KindUser && k != KindInternal }

// Logged reports whether the channel's occupancy and member changes go to
// the app's webhooks. An internal channel's never do: its member edges
// are announced on WatchUserChannel instead. The count scripts cannot call
// this, so they are given InternalPrefix (the kind's only prefix) to skip.
func (k Kind) Logged() bool { return k != KindInternal }

// AnnouncesCounts reports whether a change of the channel's count is
// announced as subscription_count (the pusher_internal event and the
// webhook) when the app asks for it. Presence channels announce members
// instead.
func (k Kind) AnnouncesCounts() bool { return k.Counted() && !k.HasMembers() }

// HasMembers reports whether the channel has presence members (user ids
// and info, member events, user_count), and so is the only kind admission
// may limit.
func (k Kind) HasMembers() bool { return k == KindPresence }

// Encrypted reports whether events on the channel are end-to-end
// encrypted, so the server never publishes plain data there.
func (k Kind) Encrypted() bool { return k == KindEncrypted }

// AllowsClientEvents reports whether clients may send client-* events on
// the channel. Encrypted channels refuse them: the server could not check
// what it relays, and Pusher refuses them too.
func (k Kind) AllowsClientEvents() bool { return k == KindPrivate || k == KindPresence }

// NeedsAuth reports whether subscribing needs a signature from the app's
// auth endpoint.
func (k Kind) NeedsAuth() bool {
	return k == KindPrivate || k == KindEncrypted || k == KindPresence
}

// IsCacheChannel reports whether name is a cache channel, whose last event
// is kept for new subscribers.
func IsCacheChannel(name string) bool {
	for _, p := range []string{"", privatePrefix, encryptedPrefix, PresencePrefix} {
		if strings.HasPrefix(name, p+cachePart) {
			return true
		}
	}
	return false
}

// KeepsHistory reports whether a channel may have a history (apps'
// history field): not a user channel nor an internal one, which are the
// server's own, and not a cache channel, which keeps its last event its
// own way.
func KeepsHistory(name string) bool {
	k := ChannelKind(name)
	return k != KindUser && k != KindInternal && !IsCacheChannel(name)
}

// ErrChannelNameTooLong is the error ValidateChannelNameMax wraps for a
// name over the limit, which Pusher servers refuse with a subscription
// error of their own (a LimitReached with status 4009, as soketi sends).
var ErrChannelNameTooLong = errors.New("channel name too long")

// ValidateChannelNameMax reports why name is not a channel a client or the
// HTTP API may use, or nil, under an app's length limit in bytes (an app's
// ChannelNameLimit, MaxChannelNameLength unless it sets its own).
// #server-to-user-{id} is valid (its id part follows the same charset).
func ValidateChannelNameMax(name string, maxLen int) error {
	rest := strings.TrimPrefix(name, UserChannelPrefix)
	switch {
	case name == "":
		return fmt.Errorf("channel name is empty")
	case len(name) > maxLen:
		return fmt.Errorf("%w: %d bytes, over the limit of %d", ErrChannelNameTooLong, len(name), maxLen)
	case rest == "":
		return fmt.Errorf("channel name %q has no user id", name)
	case !channelNamePattern.MatchString(rest):
		return fmt.Errorf("channel name %q has characters outside A-Z a-z 0-9 - _ = @ , . ;", name)
	}
	return nil
}
