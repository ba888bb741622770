package dashboard

// dashboard.go: the live dashboard (/dashboard). The page (assets/,
// embedded) polls the unsigned handlers under /dashboard/api/ once a second;
// each builds requests signed with the app's own credentials and runs them
// through the API's routes in-process, so the browser never sees a secret
// and shows exactly what a signed client of the HTTP API would read. The
// price: anyone who reaches --addr reads every app's counts, members and
// admission state, so it is off by default.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/httpx"
	"github.com/headcount/headcount/pkg/protocol"
)

const (
	// dashboardTopChannels is how many channels the dashboard's leaderboard shows.
	dashboardTopChannels = 50
	// requestTimeout bounds the API calls behind one request here.
	requestTimeout = 5 * time.Second
	// The HTTP API's names the leaderboard reads (docs/REFERENCE.md).
	orderBySubscription = "subscription_count"
	headerStaleNodes    = "X-Headcount-Stale-Nodes"
)

// capturedResponse is a response written in memory by an in-process call.
type capturedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (c *capturedResponse) Header() http.Header { return c.header }

func (c *capturedResponse) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}

func (c *capturedResponse) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.body.Write(b)
}

// apiReply is the answer of one in-process API call.
type apiReply struct {
	code   int
	header http.Header
	body   []byte
}

// errorText is a failed call's message: the API's plain-text error.
func (r apiReply) errorText() string {
	return fmt.Sprintf("%d %s: %s", r.code, http.StatusText(r.code), strings.TrimSpace(string(r.body)))
}

// callAPI signs a request with app's key and secret, as a Pusher server SDK
// would, and runs it through the API's own routes (signature check
// included) in-process. path is unescaped, as it is signed.
func (d *server) callAPI(ctx context.Context, app *apps.App, method, path string, query url.Values, body []byte) apiReply {
	q := auth.SignRequest(method, path, query, body, app.Key, app.Secret, time.Now())
	target := (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	//nolint:gosec // G704: a path served in-process by d.api below, never dialed.
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil { // only our own paths get here
		return apiReply{code: http.StatusInternalServerError, body: []byte(err.Error())}
	}
	req.RemoteAddr = "in-process"
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &capturedResponse{header: http.Header{}}
	d.api.ServeHTTP(rec, req)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return apiReply{code: rec.code, header: rec.header, body: rec.body.Bytes()}
}

// dashboardApp is the app a dashboard request names (?app=), or the first
// app of the apps file.
func (d *server) dashboardApp(w http.ResponseWriter, r *http.Request) (*apps.App, bool) {
	id := r.URL.Query().Get("app")
	if id == "" {
		if all := d.apps.All(); len(all) > 0 {
			return all[0], true
		}
	}
	app := d.byID(r.Context(), id)
	if app == nil {
		httpx.Refuse(d.log, w, r, http.StatusNotFound, fmt.Sprintf("Unknown app id %s", strconv.Quote(id)))
		return nil, false
	}
	return app, true
}

// overviewChannel is one row of the dashboard's leaderboard.
type overviewChannel struct {
	Name              string `json:"name"`
	SubscriptionCount int64  `json:"subscription_count"`
	UserCount         *int64 `json:"user_count,omitempty"`
}

// overview is what the dashboard shows, read once a second. A part that
// could not be read is null, with its reason in Errors.
type overview struct {
	App      string            `json:"app"`
	Apps     []string          `json:"apps"`
	Status   json.RawMessage   `json:"status"`
	Channels []overviewChannel `json:"channels"`
	// StaleNodes is X-Headcount-Stale-Nodes of the leaderboard's read: how
	// many nodes the counts still include though they stopped heartbeating.
	StaleNodes int               `json:"stale_nodes"`
	Admission  json.RawMessage   `json:"admission"`
	Audit      json.RawMessage   `json:"audit"`
	Errors     map[string]string `json:"errors,omitempty"`
}

// dashboardOverview serves GET /dashboard/api/overview?app=ID from the
// signed API: status, the leaderboard with user counts, admission lists
// and the audit.
func (d *server) dashboardOverview(w http.ResponseWriter, r *http.Request) {
	app, ok := d.dashboardApp(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	resp := overview{App: app.ID, Channels: []overviewChannel{}, Errors: map[string]string{}}
	for _, ap := range d.apps.All() {
		resp.Apps = append(resp.Apps, ap.ID)
	}
	base := "/apps/" + app.ID
	raw := func(part, path string, query url.Values) json.RawMessage {
		rep := d.callAPI(ctx, app, http.MethodGet, path, query, nil)
		if rep.code != http.StatusOK {
			resp.Errors[part] = rep.errorText()
			return nil
		}
		return json.RawMessage(bytes.TrimSpace(rep.body))
	}
	resp.Status = raw("status", base+"/status", nil)
	d.overviewChannels(ctx, app, &resp)
	resp.Admission = raw("admission", base+"/admission", nil)
	resp.Audit = raw("audit", base+"/audit", nil)
	if len(resp.Errors) == 0 {
		resp.Errors = nil
	}
	httpx.WriteJSON(w, resp)
}

// overviewChannels fills the leaderboard: the busiest channels, with the
// user counts of the presence ones from the presence listing.
func (d *server) overviewChannels(ctx context.Context, app *apps.App, resp *overview) {
	path := "/apps/" + app.ID + "/channels"
	rep := d.callAPI(ctx, app, http.MethodGet, path, url.Values{"order": {orderBySubscription}, "limit": {strconv.Itoa(dashboardTopChannels)}}, nil)
	if rep.code != http.StatusOK {
		resp.Errors["channels"] = rep.errorText()
		return
	}
	var top struct {
		Channels map[string]listAttributes `json:"channels"`
		Order    []string                  `json:"order"`
	}
	if err := json.Unmarshal(rep.body, &top); err != nil {
		resp.Errors["channels"] = "unreadable leaderboard: " + err.Error()
		return
	}
	resp.StaleNodes, _ = strconv.Atoi(rep.header.Get(headerStaleNodes))
	rep = d.callAPI(ctx, app, http.MethodGet, path, url.Values{"filter_by_prefix": {protocol.PresencePrefix}, "info": {"user_count"}}, nil)
	var users struct {
		Channels map[string]listAttributes `json:"channels"`
	}
	if rep.code != http.StatusOK {
		resp.Errors["users"] = rep.errorText()
	} else if err := json.Unmarshal(rep.body, &users); err != nil {
		resp.Errors["users"] = "unreadable presence listing: " + err.Error()
	}
	for _, name := range top.Order {
		c := overviewChannel{Name: name}
		if n := top.Channels[name].SubscriptionCount; n != nil {
			c.SubscriptionCount = *n
		}
		if u, ok := users.Channels[name]; ok {
			c.UserCount = u.UserCount
		}
		resp.Channels = append(resp.Channels, c)
	}
}

// dashboardMembers serves GET /dashboard/api/members?app=ID&channel=NAME:
// the presence channel's users, from GET .../channels/{name}/users.
func (d *server) dashboardMembers(w http.ResponseWriter, r *http.Request) {
	app, ok := d.dashboardApp(w, r)
	if !ok {
		return
	}
	ch := r.URL.Query().Get("channel")
	if ch == "" {
		httpx.Refuse(d.log, w, r, http.StatusBadRequest, "Missing channel")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	relay(w, d.callAPI(ctx, app, http.MethodGet, "/apps/"+app.ID+"/channels/"+ch+"/users", nil, nil))
}

// relay passes an in-process API answer on to the browser unchanged.
func relay(w http.ResponseWriter, rep apiReply) {
	if ct := rep.header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(rep.code)
	_, _ = w.Write(rep.body)
}

// listAttributes are a channel's attributes in the API's channel listing.
type listAttributes struct {
	UserCount         *int64 `json:"user_count,omitempty"`
	SubscriptionCount *int64 `json:"subscription_count,omitempty"`
}
