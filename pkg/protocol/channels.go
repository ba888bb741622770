package protocol

import (
	"fmt"
	"regexp"
	"strings"
)

// MaxChannelNameLength is the longest channel name accepted. Pusher's docs
// say 164, but pusher-http-go, pusher-http-node and soketi all allow 200,
// and apps built on them use it.
const MaxChannelNameLength = 200

var channelNamePattern = regexp.MustCompile(`^[-a-zA-Z0-9_=@,.;]+$`)

// Channel kinds, decided by name prefix.
const (
	KindPublic    = "public"
	KindPrivate   = "private"
	KindEncrypted = "private-encrypted"
	KindPresence  = "presence"
	KindUser      = "user" // #server-to-user-{id}
)

// UserChannelPrefix starts the channel a signed-in user receives events on.
const UserChannelPrefix = "#server-to-user-"

// ChannelKind returns the kind of a (valid) channel name.
func ChannelKind(name string) string {
	switch {
	case strings.HasPrefix(name, "private-encrypted-"):
		return KindEncrypted
	case strings.HasPrefix(name, "private-"):
		return KindPrivate
	case strings.HasPrefix(name, "presence-"):
		return KindPresence
	case strings.HasPrefix(name, UserChannelPrefix):
		return KindUser
	}
	return KindPublic
}

// ValidateChannelName reports why name is not a channel a client or the HTTP
// API may use, or nil. #server-to-user-{id} is valid (its id part follows the
// same charset).
func ValidateChannelName(name string) error {
	rest := strings.TrimPrefix(name, UserChannelPrefix)
	switch {
	case name == "":
		return fmt.Errorf("channel name is empty")
	case len(name) > MaxChannelNameLength:
		return fmt.Errorf("channel name is %d bytes long, over the limit of %d", len(name), MaxChannelNameLength)
	case rest == "":
		return fmt.Errorf("channel name %q has no user id", name)
	case !channelNamePattern.MatchString(rest):
		return fmt.Errorf("channel name %q has characters outside A-Z a-z 0-9 - _ = @ , . ;", name)
	}
	return nil
}
