package apps

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/headcount/headcount/pkg/protocol"
)

// DefaultClientEventsPerSecond is a socket's client-event rate when the
// app sets none: Pusher's documented limit.
const DefaultClientEventsPerSecond = 10

// ClientEventsPerSecond is the client events one socket may send per
// second, or 0 for no limit.
func (a *App) ClientEventsPerSecond() int {
	switch {
	case a.MaxClientEventsPerSecond < 0:
		return 0
	case a.MaxClientEventsPerSecond == 0:
		return DefaultClientEventsPerSecond
	}
	return a.MaxClientEventsPerSecond
}

// ChannelNameLimit is the longest channel name, in bytes, the app's
// clients and API callers may use.
func (a *App) ChannelNameLimit() int {
	if a.MaxChannelNameLength > 0 {
		return a.MaxChannelNameLength
	}
	return protocol.MaxChannelNameLength
}

// AllowsOrigin reports whether a WebSocket upgrade with this Origin
// header may connect to the app. Without allowedOrigins every origin is
// allowed. An upgrade without an Origin header is allowed: browsers always
// send one on WebSocket upgrades, so its absence means a native or server
// client, which could send any Origin it liked anyway; the list keeps
// other sites' pages out, it does not authenticate. Otherwise the origin
// must be one as browsers serialize it (RFC 6454: scheme://host[:port],
// no user, path, query or fragment, one origin; the caller joins several
// Origin headers with a space, which no entry allows), and an entry allows
// it when it is "*", the same origin (scheme, host and port, without regard
// to case), or a host pattern without a scheme (Laravel Reverb's form):
// "app.example.com", or "*.example.com" where each "*" stands for any
// characters, matched against the host of an http or https origin whatever
// its port (another scheme, such as capacitor://localhost, needs an exact
// entry). The origin "null" (sandboxed frames, file: pages) is allowed
// only by "*".
func (a *App) AllowsOrigin(origin string) bool {
	if a.AllowedOrigins == nil || origin == "" {
		return true
	}
	origin = normalOrigin(origin)
	scheme, host := serializedOrigin(origin)
	for _, e := range a.AllowedOrigins {
		e = strings.ToLower(e)
		switch {
		case e == "*":
			return true
		case scheme == "":
		case strings.Contains(e, "://"):
			if normalOrigin(e) == origin {
				return true
			}
		case (scheme == "http" || scheme == "https") && glob(e, host):
			return true
		}
	}
	return false
}

// serializedOrigin returns the scheme and host of origin (lowercased, as
// normalOrigin leaves it) if it is an origin as a browser sends one, and
// "", "" if not: an origin with a user ("https://evil.com:443@app.example.com"
// would otherwise match app.example.com), a path, a query, a fragment, or
// anything a URL parser forgives.
func serializedOrigin(origin string) (scheme, host string) {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme == "" || u.Opaque != "" || u.User != nil || u.Host == "" ||
		u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" ||
		strings.ContainsAny(origin, "@ \t") {
		return "", ""
	}
	return u.Scheme, u.Hostname()
}

// normalOrigin is s lowercased, without a trailing "/" or the scheme's
// default port, so "https://App.example.com:443/" and
// "https://app.example.com" (what browsers send) compare equal.
func normalOrigin(s string) string {
	s = strings.TrimSuffix(strings.ToLower(s), "/")
	for _, d := range []string{"https://:443", "http://:80"} {
		scheme, port, _ := strings.Cut(d, "://")
		if strings.HasPrefix(s, scheme+"://") && strings.HasSuffix(s, port) {
			return strings.TrimSuffix(s, port)
		}
	}
	return s
}

// glob matches s against pattern, where each '*' stands for any run of
// characters (dots too, as Reverb's Str::is does). It backtracks only to
// the last '*', so it takes O(len(pattern)*len(s)) at worst.
func glob(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p, mark = star+1, mark+1
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// validateLimits checks the rate limits, the channel name limit and the
// allowed origins.
func (a *App) validateLimits() []error {
	var errs []error
	if a.MaxChannelNameLength < 0 {
		errs = append(errs, fmt.Errorf("app %q: maxChannelNameLength must not be negative, not %d", a.ID, a.MaxChannelNameLength))
	}
	for i, e := range a.AllowedOrigins {
		if err := checkOriginEntry(e); err != nil {
			errs = append(errs, fmt.Errorf("app %q: allowedOrigins[%d] %q: %w", a.ID, i, e, err))
		}
	}
	return errs
}

// hostPatternChars are the characters of a host pattern.
const hostPatternChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_*"

// checkOriginEntry reports why e cannot be an allowedOrigins entry.
func checkOriginEntry(e string) error {
	switch {
	case e == "*":
		return nil
	case e == "":
		return fmt.Errorf("empty")
	case strings.Contains(e, "://"):
		u, err := url.Parse(e)
		if err != nil {
			return err
		}
		if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.Contains(e, "*") {
			return fmt.Errorf("an origin is scheme://host[:port], with nothing after and no wildcard (write a host pattern such as *.example.com instead)")
		}
		return nil
	}
	for _, c := range e {
		if !strings.ContainsRune(hostPatternChars, c) {
			return fmt.Errorf("a host pattern holds letters, digits, '.', '-', '_' and '*' only (an origin with a scheme is matched exactly: https://app.example.com)")
		}
	}
	return nil
}
