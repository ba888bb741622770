package dashboard

// guard.go: what keeps other web pages away from the unsigned dashboard and
// demo routes. Those routes trust whoever reaches --addr; a browser reaches
// it for pages of any site, two ways:
//
//   - DNS rebinding: a hostile site's name is made to resolve to this
//     server, so its page reads our routes as its own origin. The request
//     then carries the hostile name in Host, so every route answers only
//     to the host names it is known by (Options.Hosts).
//   - Cross-site requests: any page may POST a "simple" request (such as
//     text/plain) to any address, unread but acted on. The POSTs require
//     Content-Type: application/json, which no page can send cross-origin
//     without a CORS preflight we never answer, and an Origin, when the
//     browser sends one, equal to the request's own host.

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/headcount/headcount/pkg/httpx"
)

// drainGrace bounds reading what is left of a refused request's body
// (refuseUnread), as it does for the API's refusals.
const drainGrace = time.Second

// hostSet is the set of names (lowercase, no final dot) the dashboard and
// demo answer to besides loopback names and IP addresses.
func hostSet(names []string) map[string]bool {
	hosts := map[string]bool{}
	for _, h := range names {
		if h = strings.TrimSuffix(strings.ToLower(h), "."); h != "" {
			hosts[h] = true
		}
	}
	return hosts
}

// hostAllowed reports whether a Host header (host[:port]) names this
// server as the dashboard knows it. An IP address always does: a page
// whose origin is an IP address of ours is ours, and no rebinding turns a
// hostile name into one. So do localhost and *.localhost, which resolve
// to loopback only.
func (d *server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	switch {
	case host == "":
		return false
	case net.ParseIP(host) != nil:
		return true
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return true
	}
	return d.hosts[host]
}

// sameOrigin reports whether an Origin header names the host the request
// was sent to (default ports aside).
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false // includes "null": sandboxed frames, file: pages
	}
	return strings.EqualFold(withoutDefaultPort(u.Host), withoutDefaultPort(host))
}

func withoutDefaultPort(hostport string) string {
	if h, p, err := net.SplitHostPort(hostport); err == nil && (p == "80" || p == "443") {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return hostport
}

// guard lets a dashboard or demo request through only if its Host is
// allowed (403), its Origin, when sent, is the request's own host (403)
// and, for a POST, its Content-Type is application/json (415).
func (d *server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !d.hostAllowed(r.Host) {
			d.refuseUnread(w, r, http.StatusForbidden, fmt.Sprintf(
				"Host %s is not one the dashboard answers to (a guard against DNS rebinding): "+
					"use an IP address, localhost or --addr's host, or add the name to --dashboard-hosts", strconv.Quote(r.Host)))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r.Host) {
			d.refuseUnread(w, r, http.StatusForbidden, fmt.Sprintf("Cross-origin request refused: Origin %s is not %s", strconv.Quote(origin), strconv.Quote(r.Host)))
			return
		}
		if r.Method == http.MethodPost {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				d.refuseUnread(w, r, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// refuseUnread refuses a request from its head alone and closes the
// connection after the answer, as the API refuses an unsigned request: a
// page of another site cannot keep connections open with requests that are
// refused, and what is left of a body gets drainGrace, not the rest of
// --read-timeout.
func (d *server) refuseUnread(w http.ResponseWriter, r *http.Request, code int, msg string) {
	w.Header().Set("Connection", "close")
	if r.ContentLength != 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainGrace)) // not supported in-process: nothing to drain there
	}
	httpx.Refuse(d.log, w, r, code, msg)
}
