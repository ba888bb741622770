package wsnode

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/portcap"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/wsfront"
)

// The node's checks of an upgrade request, which either transport's
// handshake (serveWS, serveLoop) makes: the Origin before the upgrade,
// the app key, the protocol version and the app's connection quota after
// it (socket.open).

// originAllowed refuses, with 403 before the upgrade, an upgrade whose
// Origin the app's allowedOrigins do not allow (apps.App.AllowsOrigin), so
// a browser page gets an HTTP error rather than a socket. An unknown or
// disabled app is left to admit, which answers it the Pusher way.
func (a *App) originAllowed(w http.ResponseWriter, r *http.Request) bool {
	key, _ := requestPath(r)
	app := a.appByKey(r.Context(), key)
	// Two Origin headers are joined, and so refused by any list: the
	// first alone would let a non-browser client choose what is checked.
	origin := strings.Join(r.Header.Values("Origin"), " ")
	if app == nil || app.AllowsOrigin(origin) {
		return true
	}
	a.m.errors[reasonOrigin].Inc()
	wsfront.Counted(w)
	http.Error(w, "Origin "+portcap.Clip(origin)+" is not allowed for app "+app.ID+" (its allowedOrigins)", http.StatusForbidden)
	return false
}

// admit checks the app key and protocol version; on refusal it returns the
// error to send (its code is also the close code) and the metric reason.
// A key the node did not serve was looked up in the apps' source by
// originAllowed, which both transports' handshakes call first.
func (a *App) admit(r *http.Request) (*apps.App, *protocol.Error, reason) {
	key, _ := requestPath(r)
	app := a.cfg.Apps.ByKey(key)
	switch {
	case app == nil:
		return nil, &protocol.Error{Code: protocol.CodeAppNotFound, Message: "App key " + portcap.Clip(key) + " does not exist"}, reasonAppNotFound
	case !app.Enabled:
		return nil, &protocol.Error{Code: protocol.CodeAppDisabled, Message: "App " + app.ID + " is disabled"}, reasonAppDisabled
	}
	v := queryValue(r.URL.RawQuery, "protocol")
	if v == "" {
		return nil, &protocol.Error{Code: protocol.CodeNoProtocol, Message: "No protocol version given: connect with ?protocol=7"}, reasonBadProtocol
	}
	if n, err := strconv.Atoi(v); err != nil || n < minProtocol || n > maxProtocol {
		return nil, &protocol.Error{Code: protocol.CodeUnsupportedProtocol, Message: "Unsupported protocol version " + portcap.Clip(v) + ": this server speaks 5 to 7"}, reasonBadProtocol
	}
	return app, nil, 0 // no refusal: the reason is not read
}

// requestPath is the app key and resume id (empty if none) of r, whose
// path the front routed only if wsfront.ParsePath accepted it.
func requestPath(r *http.Request) (key, resumeID string) {
	key, resumeID, _ = wsfront.ParsePath(r.URL.Path)
	return key, resumeID
}

// Protocol versions accepted; pusher-js sends 7.
const minProtocol, maxProtocol = 5, 7

// queryValue is url.Values.Get for one name without building the map.
func queryValue(rawQuery, name string) string {
	for rawQuery != "" {
		var kv string
		kv, rawQuery, _ = strings.Cut(rawQuery, "&")
		if k, v, _ := strings.Cut(kv, "="); k == name {
			if u, err := url.QueryUnescape(v); err == nil {
				return u
			}
			return v
		}
	}
	return ""
}

// checkConnectionLimit refuses a socket when the app's open sockets
// cluster-wide (from the counts) reached its MaxConnections. The count
// lags by a flush, so a burst of connects may overshoot by what the
// nodes have not flushed yet. If Redis cannot be read the socket is let in:
// refusing every client during a Redis blip would be worse.
func (a *App) checkConnectionLimit(app *apps.App) *protocol.Error {
	if app.MaxConnections <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.tun.redisTimeout)
	defer cancel()
	n, err := a.store.Connections(ctx, app.ID)
	if err != nil {
		a.log.Warn("cannot read connection count; letting the socket in", "app", app.ID, "error", err)
		return nil
	}
	if n >= int64(app.MaxConnections) {
		return &protocol.Error{Code: protocol.CodeOverConnectionQuota,
			Message: "App " + app.ID + " is over its connection quota of " + strconv.Itoa(app.MaxConnections)}
	}
	return nil
}
