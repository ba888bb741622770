package wsnode

import (
	"context"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/protocol"
)

// appByKey returns the app one of whose keys is key, or nil. A key the
// node does not serve, or serves disabled, is first looked up in the
// apps' source (appreload.Reloader.Lookup), so an app inserted, enabled or
// given a key a moment ago admits its first client rather than refusing
// it with 4001 or 4003 until the next poll: pusher-js never retries those.
func (a *App) appByKey(ctx context.Context, key string) *apps.App {
	app := a.cfg.Apps.ByKey(key)
	if app == nil || !app.Enabled {
		a.reload.Lookup(ctx, "key "+key, func() bool {
			app = a.cfg.Apps.ByKey(key)
			return app != nil && app.Enabled
		})
	}
	return app
}

// watchApps applies each reload of the apps (package appreload) to the
// sockets open on this node until ctx ends.
func (a *App) watchApps(ctx context.Context) {
	for {
		changed := a.cfg.Apps.Changed()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		for _, s := range a.hub.snapshot() {
			s.refreshApp()
		}
	}
}

// refreshApp gives s its app as the apps now are. A socket whose app was
// removed is closed with 4001, one whose app was disabled with 4003: the
// codes it would get connecting now, and after which pusher-js does not
// reconnect. Any other change applies to what s does next (its client
// events, its next subscribe's limits); nothing already granted is taken
// back, so a lowered maxConnections or maxChannelsPerConnection evicts
// nobody. A socket that connected with a key since removed from its app
// stays: its app is the same.
//
// The handshake calls it too, after it set s.app: a reload between the
// handshake's lookup and that store is then seen by one of the two.
func (s *socket) refreshApp() {
	a := s.node
	was := s.app.Load()
	if was == nil {
		return // not admitted yet: the handshake calls refreshApp after
	}
	now := a.cfg.Apps.ByID(was.ID)
	switch {
	case now == was:
	case now == nil:
		if s.refuseNow(&protocol.Error{Code: protocol.CodeAppNotFound, Message: "App " + was.ID + " no longer exists"}) {
			a.m.appsRemoved.Inc()
		}
	case !now.Enabled:
		if s.refuseNow(&protocol.Error{Code: protocol.CodeAppDisabled, Message: "App " + was.ID + " is disabled"}) {
			a.m.appsDisabled.Inc()
		}
	default:
		s.app.CompareAndSwap(was, now)
	}
}
