package apps

import "strings"

// Longest returns the rule of rules whose prefix starts channel and is the
// longest such: the one way a channel's rule is chosen, for capacities and
// history alike, so "chat-vip-" beats "chat-" whatever their order.
func Longest[R any](rules []R, prefix func(R) string, channel string) (R, bool) {
	var best R
	n, found := -1, false
	for _, r := range rules {
		if p := prefix(r); len(p) > n && strings.HasPrefix(channel, p) {
			best, n, found = r, len(p), true
		}
	}
	return best, found
}
