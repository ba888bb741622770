package dashboard

// demo.go: the demo room's server side (/demo).
// It plays the app server a real application would have: it asks the
// signed admission API for a seat (join, leave) and signs the presence
// subscription (auth), for the first app of the apps file and one channel
// only, demoChannel. Unsigned by design, like the dashboard: anyone who
// reaches --addr may join the demo room under any name.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/httpx"
	"github.com/headcount/headcount/pkg/protocol"
)

const (
	// demoChannel is the room; `make run` gives presence-room- a capacity.
	demoChannel = "presence-room-demo"
	// maxDemoName bounds a visitor's display name (characters).
	maxDemoName = 40
	// maxDemoBody bounds a demo request body.
	maxDemoBody = 4 << 10
)

// demoUserID is the form of the user ids the demo page makes up (name slug
// and random suffix): plain, so they read well on the dashboard.
var demoUserID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// demoApp is the app the demo room belongs to: the apps file's first.
func (d *server) demoApp(w http.ResponseWriter, r *http.Request) (*apps.App, bool) {
	all := d.apps.All()
	if len(all) == 0 {
		httpx.Refuse(d.log, w, r, http.StatusNotFound, "No app is configured")
		return nil, false
	}
	return all[0], true
}

// demoConfig serves GET /demo/api/config: what pusher-js needs to connect
// (the key is public; the secret stays here).
func (d *server) demoConfig(w http.ResponseWriter, r *http.Request) {
	app, ok := d.demoApp(w, r)
	if !ok {
		return
	}
	host, port, _ := net.SplitHostPort(d.demoWS) // validated by config
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "" // listening everywhere: the page's own host reaches it
	}
	p, _ := strconv.Atoi(port)
	httpx.WriteJSON(w, map[string]any{
		"app":      app.ID,
		"key":      app.Key,
		"ws_host":  host,
		"ws_port":  p,
		"channel":  demoChannel,
		"capacity": admission.RuleFor(app, demoChannel).Capacity,
	})
}

// demoRoom serves GET /demo/api/room: the room's gate (capacity,
// occupancy, waiting), as GET .../admission answers it, so an admitted
// visitor's page sees the waiting list change.
func (d *server) demoRoom(w http.ResponseWriter, r *http.Request) {
	app, ok := d.demoApp(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	relay(w, d.callAPI(ctx, app, http.MethodGet, "/apps/"+app.ID+"/channels/"+demoChannel+"/admission", nil, nil))
}

// demoRequest is the JSON body of the demo's POST handlers.
type demoRequest struct {
	UserID      string `json:"user_id"`
	Name        string `json:"name"`
	SocketID    string `json:"socket_id"`
	ChannelName string `json:"channel_name"`
}

// readDemo decodes and checks a demo request body.
func (d *server) readDemo(w http.ResponseWriter, r *http.Request) (demoRequest, bool) {
	var req demoRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxDemoBody))
	if err := dec.Decode(&req); err != nil {
		httpx.Refuse(d.log, w, r, http.StatusBadRequest, fmt.Sprintf("The body must be a JSON object: %v", err))
		return req, false
	}
	if !demoUserID.MatchString(req.UserID) {
		httpx.Refuse(d.log, w, r, http.StatusBadRequest, "user_id must be 1-64 characters of A-Z a-z 0-9 _ -")
		return req, false
	}
	return req, true
}

// demoJoin serves POST /demo/api/join {"user_id"}: the admission check (or
// check-in) for the visitor, answered as the API answers it.
func (d *server) demoJoin(w http.ResponseWriter, r *http.Request) {
	d.demoAdmission(w, r, http.MethodPost)
}

// demoLeave serves POST /demo/api/leave {"user_id"}: give up the seat or
// the place on the list.
func (d *server) demoLeave(w http.ResponseWriter, r *http.Request) {
	d.demoAdmission(w, r, http.MethodDelete)
}

func (d *server) demoAdmission(w http.ResponseWriter, r *http.Request, method string) {
	app, ok := d.demoApp(w, r)
	if !ok {
		return
	}
	req, ok := d.readDemo(w, r)
	if !ok {
		return
	}
	body, _ := json.Marshal(map[string]string{"user_id": req.UserID}) // strings always encode
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	relay(w, d.callAPI(ctx, app, method, "/apps/"+app.ID+"/channels/"+demoChannel+"/admission", nil, body))
}

// demoAuth serves POST /demo/api/auth {"socket_id", "channel_name",
// "user_id", "name"}: pusher-js's channel authorization of the demo room,
// with channel_data {"user_id", "user_info": {"name"}}. The wsnode still
// refuses the subscription unless the user holds a seat.
func (d *server) demoAuth(w http.ResponseWriter, r *http.Request) {
	app, ok := d.demoApp(w, r)
	if !ok {
		return
	}
	req, ok := d.readDemo(w, r)
	if !ok {
		return
	}
	name := strings.TrimSpace(req.Name)
	switch {
	case req.ChannelName != demoChannel:
		httpx.Refuse(d.log, w, r, http.StatusForbidden, fmt.Sprintf("The demo signs %s only", demoChannel))
		return
	case !protocol.ValidSocketID(req.SocketID):
		httpx.Refuse(d.log, w, r, http.StatusBadRequest, "Malformed socket_id")
		return
	case name == "" || utf8.RuneCountInString(name) > maxDemoName || strings.IndexFunc(name, unicode.IsControl) >= 0:
		httpx.Refuse(d.log, w, r, http.StatusBadRequest, fmt.Sprintf("name must be 1-%d printable characters", maxDemoName))
		return
	}
	data, _ := json.Marshal(map[string]any{"user_id": req.UserID, "user_info": map[string]string{"name": name}})
	sig := auth.Sign(app.Secret, auth.ChannelAuthString(req.SocketID, demoChannel, string(data)))
	httpx.WriteJSON(w, map[string]string{"auth": app.Key + ":" + sig, "channel_data": string(data)})
}
