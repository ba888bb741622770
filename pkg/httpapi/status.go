package httpapi

// status.go: signed, read-only headcount endpoints for what the Pusher API
// has no shape for; the dashboard reads them too. They are served with or
// without --dashboard: like every /apps/ route they need the app's secret.
//
//	GET /apps/{app_id}/status     nodes (last-seen, connections), the cleaner lease
//	GET /apps/{app_id}/admission  every gated channel's capacity, occupancy, waiting
//	GET /apps/{app_id}/audit      the drift counts' audit finds (cached auditEvery)

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/httpx"
	"github.com/headcount/headcount/pkg/lease"
)

const (
	// auditEvery bounds how often one process runs an app's audit: its
	// script holds the app's shard for time linear in the app's counts.
	auditEvery = 5 * time.Second
	// maxAuditDiffs caps the differences an answer lists (it counts all).
	maxAuditDiffs = 100
	// defaultListsLimit and maxListsLimit bound GET .../admission's channels.
	defaultListsLimit = 20
	maxListsLimit     = 100
)

// nodeJSON is one wsnode in GET .../status.
type nodeJSON struct {
	ID string `json:"id"`
	// LastSeenMs is the node's last heartbeat, unix ms by Redis's clock.
	LastSeenMs int64 `json:"last_seen_ms"`
	// AgeMs is how long ago that was, by the same clock.
	AgeMs int64 `json:"age_ms"`
	// Stale: not seen for --stale-after; counted until the cleaner reaps it.
	Stale       bool  `json:"stale"`
	Connections int64 `json:"connections"`
}

// leaseJSON is the cleaners' lease in GET .../status.
type leaseJSON struct {
	Held bool `json:"held"`
	// Holder is a short id of the holder's token: it changes on a failover.
	Holder      string `json:"holder,omitempty"`
	ExpiresInMs int64  `json:"expires_in_ms"`
}

type statusJSON struct {
	TimeMs       int64      `json:"time_ms"`
	StaleAfterMs int64      `json:"stale_after_ms"`
	Nodes        []nodeJSON `json:"nodes"`
	Connections  int64      `json:"connections"`
	Cleaner      leaseJSON  `json:"cleaner"`
}

// getStatus serves GET /apps/{app_id}/status.
func (a *App) getStatus(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	nodes, now, err := a.store.NodeStatuses(ctx, req.app.ID)
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	conns, err := a.store.Connections(ctx, req.app.ID)
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	held, err := lease.Read(ctx, a.rdb, lease.CleanerKey(a.ks))
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	staleAfter := a.listings.Options().StaleAfter
	resp := statusJSON{TimeMs: now.UnixMilli(), StaleAfterMs: staleAfter.Milliseconds(), Nodes: make([]nodeJSON, len(nodes)), Connections: conns,
		Cleaner: leaseJSON{Held: held.Held, Holder: held.Holder, ExpiresInMs: held.ExpiresIn.Milliseconds()}}
	for i, n := range nodes {
		resp.Nodes[i] = nodeJSON{ID: n.ID, LastSeenMs: n.LastSeen.UnixMilli(), AgeMs: n.Age.Milliseconds(), Stale: n.Age >= staleAfter, Connections: n.Connections}
	}
	httpx.WriteJSON(w, resp)
}

// gateJSON is one gated channel in GET .../admission.
type gateJSON struct {
	Channel   string `json:"channel"`
	Capacity  int    `json:"capacity"`
	Occupancy int    `json:"occupancy"`
	Waiting   int    `json:"waiting"`
}

// getAdmissionLists serves GET /apps/{app_id}/admission?limit=N: the gated
// channels, longest waiting list first. Reading a gate settles it, as GET
// .../channels/{name}/admission does, and what that changed is reported
// the same way.
func (a *App) getAdmissionLists(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	limit := defaultListsLimit
	if v, ok := req.query["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > maxListsLimit {
			httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf("Invalid limit %s: an integer from 1 to %d", strconv.Quote(clipValue(v[0], 40)), maxListsLimit))
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	lists, err := a.gate.Lists(ctx, req.app.ID, limit, func(ch string) admission.Rule { return admission.RuleFor(req.app, ch) })
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	resp := struct {
		Channels []gateJSON `json:"channels"`
	}{Channels: make([]gateJSON, len(lists))}
	for i, l := range lists {
		a.afterGate(req.app, l.Channel, l.State, l.Changes, false, "")
		resp.Channels[i] = gateJSON{Channel: l.Channel, Capacity: l.Capacity, Occupancy: l.Occupancy, Waiting: l.Waiting}
	}
	httpx.WriteJSON(w, resp)
}

// auditCache keeps each app's last audit, so the audit runs at most once
// per auditEvery per process however many dashboards ask.
type auditCache struct {
	// every is how long an audit is reused: auditEvery unless a test set it.
	every time.Duration
	mu    sync.Mutex
	apps  map[string]*auditEntry
}

type auditEntry struct {
	mu    sync.Mutex // held while the audit runs: concurrent askers wait for it
	at    time.Time
	drift counts.Drift
}

func (c *auditCache) entry(app string) *auditEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apps == nil {
		c.apps = map[string]*auditEntry{}
	}
	e := c.apps[app]
	if e == nil {
		e = &auditEntry{}
		c.apps[app] = e
	}
	return e
}

type diffJSON struct {
	Kind    string `json:"kind"`
	Channel string `json:"channel,omitempty"`
	User    string `json:"user,omitempty"`
	Node    string `json:"node,omitempty"`
	Field   string `json:"field,omitempty"`
	Want    int64  `json:"want"`
	Have    int64  `json:"have"`
	Present bool   `json:"present"`
}

type auditJSON struct {
	// AgeMs is how long ago this process ran the audit.
	AgeMs int64 `json:"age_ms"`
	Nodes int   `json:"nodes"`
	// Differences counts every difference; Drift lists the first ones.
	Differences int        `json:"differences"`
	Drift       []diffJSON `json:"drift"`
}

// getAudit serves GET /apps/{app_id}/audit: counts' read-only audit of the
// app (global counts against the sum of the nodes' contributions), run at
// most every auditEvery per process. It never repairs.
func (a *App) getAudit(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	e := a.audits.entry(req.app.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	every := a.audits.every
	if every == 0 {
		every = auditEvery
	}
	if e.at.IsZero() || time.Since(e.at) >= every {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		d, err := a.store.Audit(ctx, req.app.ID)
		if err != nil {
			a.redisFailed(w, r, req.app, err)
			return
		}
		e.drift, e.at = d, time.Now()
	}
	resp := auditJSON{AgeMs: time.Since(e.at).Milliseconds(), Nodes: e.drift.Nodes, Differences: len(e.drift.Diffs), Drift: []diffJSON{}}
	for _, d := range e.drift.Diffs[:min(len(e.drift.Diffs), maxAuditDiffs)] {
		resp.Drift = append(resp.Drift, diffJSON{Kind: string(d.Kind), Channel: d.Channel, User: d.User, Node: d.Node, Field: d.Field, Want: d.Want, Have: d.Have, Present: d.Present})
	}
	httpx.WriteJSON(w, resp)
}
