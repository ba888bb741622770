package dashboard_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/apitest"
	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/config"
)

// demoChannel is the demo room's channel.
const demoChannel = "presence-room-demo"

// startDashboard runs an httpapi.App with --dashboard (or without) and a
// short --stale-after, so a node that stops heartbeating turns stale
// quickly.
func startDashboard(t *testing.T, common config.Common, dashboard bool) *testServer {
	t.Helper()
	return start(t, common, config.HTTPAPI{StaleAfter: 300 * time.Millisecond, Dashboard: dashboard, DemoWS: "127.0.0.1:6001"})
}

// TestDashboardAndDemoHandlers: with --dashboard, the pages and their
// unsigned handlers answer from the signed API and never show the secret;
// without it, none of them exists.
func TestDashboardAndDemoHandlers(t *testing.T) {
	srv := redistest.New(t)
	rdb := srv.Client(t)
	off := startDashboard(t, config.Common{Redis: srv.URL()}, false)
	for _, p := range []string{"/dashboard", "/demo", "/dashboard/api/overview", "/demo/api/config", "/demo/api/room", "/dashboard/assets/dashboard.js"} {
		require.Equal(t, http.StatusNotFound, off.do(t, http.MethodGet, p, "", nil).code, p)
	}
	require.Equal(t, http.StatusNotFound, off.do(t, http.MethodPost, "/demo/api/join", "", []byte(`{"user_id":"a"}`)).code)

	s := startDashboard(t, config.Common{Redis: srv.URL()}, true)
	var bodies []string
	get := func(path string) string {
		t.Helper()
		r := s.do(t, http.MethodGet, path, "", nil)
		require.Equal(t, http.StatusOK, r.code, "%s: %s", path, r.body)
		bodies = append(bodies, r.body)
		return r.body
	}
	post := func(path, body string, want int) map[string]any {
		t.Helper()
		r := s.doHeader(t, http.MethodPost, path, "", http.Header{"Content-Type": {"application/json"}}, []byte(body))
		require.Equal(t, want, r.code, "%s %s: %s", path, body, r.body)
		bodies = append(bodies, r.body)
		var m map[string]any
		if want == http.StatusOK {
			require.NoError(t, json.Unmarshal([]byte(r.body), &m), r.body)
		}
		return m
	}

	page := s.do(t, http.MethodGet, "/dashboard", "", nil)
	require.Equal(t, http.StatusOK, page.code)
	require.Contains(t, page.header.Get("Content-Security-Policy"), "default-src 'self'")
	require.Contains(t, page.body, "/dashboard/assets/dashboard.js")
	require.Contains(t, get("/demo"), "/dashboard/assets/pusher.min.js")
	js := get("/dashboard/assets/pusher.min.js")
	require.True(t, strings.HasPrefix(js, "/* pusher-js 8.6.0"), "the vendored pusher-js says its version")
	require.True(t, strings.Contains(js, `const r="8.6.0"`), "and it is that version")
	require.Contains(t, get("/dashboard/assets/pusher.min.js.LICENSE.txt"), "Pusher JavaScript Library v8.6.0")

	// Counts for the overview: a presence channel with two users.
	p := apitest.NewProducer(t, rdb, "node-a")
	p.Rec.AddConnections(appID, 3)
	p.Rec.AddMember(appID, "presence-room-1", "ada", json.RawMessage(`{"name":"Ada"}`), 1)
	p.Rec.AddMember(appID, "presence-room-1", "bob", nil, 1)
	p.Add(t, appID, map[string]int64{"presence-room-1": 2, "public-news": 1}, map[string]int64{"presence-room-1": 2, "public-news": 1})

	type overviewChannel struct {
		Name              string `json:"name"`
		SubscriptionCount int64  `json:"subscription_count"`
		UserCount         *int64 `json:"user_count,omitempty"`
	}
	var ov struct {
		App    string   `json:"app"`
		Apps   []string `json:"apps"`
		Status struct {
			Nodes []struct {
				Connections int64 `json:"connections"`
			} `json:"nodes"`
		} `json:"status"`
		Channels []overviewChannel `json:"channels"`
		Audit    struct {
			Differences int `json:"differences"`
		} `json:"audit"`
		Errors map[string]string `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(get("/dashboard/api/overview")), &ov))
	require.Empty(t, ov.Errors)
	require.Equal(t, appID, ov.App, "the first app by default")
	require.Equal(t, []string{appID, offID}, ov.Apps)
	require.Len(t, ov.Status.Nodes, 1)
	require.EqualValues(t, 3, ov.Status.Nodes[0].Connections)
	two := int64(2)
	require.Equal(t, []overviewChannel{{Name: "presence-room-1", SubscriptionCount: 2, UserCount: &two}, {Name: "public-news", SubscriptionCount: 1}}, ov.Channels)
	require.Equal(t, 0, ov.Audit.Differences)
	require.JSONEq(t, `{"users":[{"id":"ada"},{"id":"bob"}]}`, get("/dashboard/api/members?channel=presence-room-1"))

	r := s.do(t, http.MethodGet, "/dashboard/api/overview", "app=nope", nil)
	require.Equal(t, http.StatusNotFound, r.code)
	// A disabled app's data is refused by the API itself, part by part.
	require.NoError(t, json.Unmarshal([]byte(get("/dashboard/api/overview?app="+offID)), &ov))
	require.Contains(t, ov.Errors["status"], "403")
	r = s.do(t, http.MethodGet, "/dashboard/api/members", "channel=public-news", nil)
	require.Equal(t, http.StatusBadRequest, r.code, "the API's own 400 is passed on")
	require.Contains(t, r.body, "presence channels")
	r = s.do(t, http.MethodGet, "/dashboard/api/members", "", nil)
	require.Equal(t, http.StatusBadRequest, r.code, r.body)

	// The demo room: presence-room-demo has capacity 2 by the prefix rule.
	cfg := map[string]any{}
	require.NoError(t, json.Unmarshal([]byte(get("/demo/api/config")), &cfg))
	require.Equal(t, map[string]any{"app": appID, "key": appKey, "ws_host": "127.0.0.1", "ws_port": 6001.0, "channel": demoChannel, "capacity": 2.0}, cfg)
	require.Equal(t, "admitted", post("/demo/api/join", `{"user_id":"ada-1"}`, http.StatusOK)["status"])
	require.Equal(t, "admitted", post("/demo/api/join", `{"user_id":"bob-2"}`, http.StatusOK)["status"])
	require.Equal(t, map[string]any{"status": "waiting", "position": 1.0, "waiting": 1.0, "capacity": 2.0, "occupancy": 2.0},
		post("/demo/api/join", `{"user_id":"cy-3"}`, http.StatusOK))
	// The room line of an admitted visitor's page follows the list.
	room := func() map[string]any {
		t.Helper()
		m := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(get("/demo/api/room")), &m))
		return m
	}
	require.Equal(t, map[string]any{"capacity": 2.0, "occupancy": 2.0, "waiting": 1.0}, room())
	require.Equal(t, map[string]any{}, post("/demo/api/leave", `{"user_id":"ada-1"}`, http.StatusOK))
	require.Equal(t, "admitted", post("/demo/api/join", `{"user_id":"cy-3"}`, http.StatusOK)["status"], "the head of the list took the seat")
	require.Equal(t, map[string]any{"capacity": 2.0, "occupancy": 2.0, "waiting": 0.0}, room())
	post("/demo/api/join", `{"user_id":"no spaces"}`, http.StatusBadRequest)
	post("/demo/api/join", `not json`, http.StatusBadRequest)

	a := post("/demo/api/auth", `{"socket_id":"123.456","channel_name":"presence-room-demo","user_id":"cy-3","name":"Cy <3"}`, http.StatusOK)
	data, _ := a["channel_data"].(string)
	require.JSONEq(t, `{"user_id":"cy-3","user_info":{"name":"Cy <3"}}`, data)
	sig, _ := a["auth"].(string)
	require.NoError(t, auth.CheckChannelAuth(s.apps.ByID(appID), "123.456", demoChannel, data, sig))
	post("/demo/api/auth", `{"socket_id":"123.456","channel_name":"presence-other","user_id":"cy-3","name":"Cy"}`, http.StatusForbidden)
	post("/demo/api/auth", `{"socket_id":"nope","channel_name":"presence-room-demo","user_id":"cy-3","name":"Cy"}`, http.StatusBadRequest)
	post("/demo/api/auth", `{"socket_id":"123.456","channel_name":"presence-room-demo","user_id":"cy-3","name":""}`, http.StatusBadRequest)

	for _, b := range bodies {
		require.NotContains(t, b, appSecret, "the secret never reaches the browser")
	}
	m, err := metricstest.Scrape("http://" + s.app.AdminAddr() + "/metrics")
	require.NoError(t, err)
	require.Contains(t, m.LabelValues("headcount_httpapi_requests_total", "route"), "GET /apps/{app_id}/status", "in-process calls go through the API's routes")
}

// TestDashboardGuard: every dashboard and demo route answers only to the
// host names the server is known by (DNS rebinding), refuses a request
// whose Origin is another site, and the demo's POSTs take JSON only.
func TestDashboardGuard(t *testing.T) {
	srv := redistest.New(t)
	s := start(t, config.Common{Redis: srv.URL()}, config.HTTPAPI{Dashboard: true, DemoWS: "127.0.0.1:6001",
		DashboardHosts: "dash.example.com"})
	own := strings.TrimPrefix(s.base, "http://")
	json := http.Header{"Content-Type": {"application/json"}}
	with := func(h http.Header, kv ...string) http.Header {
		c := h.Clone()
		if c == nil {
			c = http.Header{}
		}
		for i := 0; i < len(kv); i += 2 {
			c.Set(kv[i], kv[i+1])
		}
		return c
	}
	join := []byte(`{"user_id":"ada-1"}`)
	routes := []struct {
		method, path string
		header       http.Header
		body         []byte
	}{
		{"GET", "/dashboard", nil, nil},
		{"GET", "/dashboard/assets/dashboard.js", nil, nil},
		{"GET", "/dashboard/api/overview", nil, nil},
		{"GET", "/dashboard/api/members?channel=presence-room-1", nil, nil},
		{"GET", "/demo", nil, nil},
		{"GET", "/demo/api/config", nil, nil},
		{"GET", "/demo/api/room", nil, nil},
		{"POST", "/demo/api/join", json, join},
		{"POST", "/demo/api/leave", json, join},
		{"POST", "/demo/api/auth", json, []byte(`{"socket_id":"1.2","channel_name":"presence-room-demo","user_id":"ada-1","name":"Ada"}`)},
	}
	call := func(method, path string, h http.Header, body []byte) response {
		t.Helper()
		p, q, _ := strings.Cut(path, "?")
		return s.doHeader(t, method, p, q, h, body)
	}
	for _, rt := range routes {
		// Served on the address itself, as the browser test and make run use it.
		r := call(rt.method, rt.path, rt.header, rt.body)
		require.Equal(t, http.StatusOK, r.code, "%s %s: %s", rt.method, rt.path, r.body)
		// DNS rebinding: a hostile name resolving to this server.
		for _, host := range []string{"evil.example", "evil.example:" + strings.Split(own, ":")[1], "dash.example.com.evil.example", "localhost.evil.example"} {
			r = call(rt.method, rt.path, with(rt.header, "Host", host), rt.body)
			require.Equal(t, http.StatusForbidden, r.code, "%s %s Host %s", rt.method, rt.path, host)
			require.Contains(t, r.body, "is not one the dashboard answers to")
			require.Contains(t, r.body, "--dashboard-hosts")
		}
		// Another site's page.
		for _, origin := range []string{"http://evil.example", "null", "http://" + own + ".evil.example"} {
			r = call(rt.method, rt.path, with(rt.header, "Origin", origin), rt.body)
			require.Equal(t, http.StatusForbidden, r.code, "%s %s Origin %s", rt.method, rt.path, origin)
			require.Contains(t, r.body, "Cross-origin request refused")
		}
		r = call(rt.method, rt.path, with(rt.header, "Origin", "http://"+own), rt.body)
		require.Equal(t, http.StatusOK, r.code, "same origin: %s", r.body)
	}

	// The names the dashboard answers to: --dashboard-hosts, IP addresses,
	// localhost and its subdomains (port and case aside).
	for _, host := range []string{"dash.example.com", "DASH.example.com:8080", "dash.example.com.", "localhost:1", "app.localhost", "10.1.2.3:8080", "[::1]:8080"} {
		r := call("GET", "/demo/api/config", http.Header{"Host": {host}}, nil)
		require.Equal(t, http.StatusOK, r.code, "Host %s: %s", host, r.body)
		r = call("POST", "/demo/api/join", with(json, "Host", host, "Origin", "http://"+host), join)
		require.Equal(t, http.StatusOK, r.code, "Host %s: %s", host, r.body)
	}
	// Default ports are left out of Origin, and of Host by some proxies.
	for _, hosts := range [][2]string{{"dash.example.com:443", "https://dash.example.com"}, {"dash.example.com", "http://dash.example.com:80"}, {"[::1]:80", "http://[::1]"}} {
		r := call("POST", "/demo/api/join", with(json, "Host", hosts[0], "Origin", hosts[1]), join)
		require.Equal(t, http.StatusOK, r.code, "Host %s Origin %s: %s", hosts[0], hosts[1], r.body)
	}

	// The POSTs take JSON only: a form or text/plain is what another site
	// can send without asking.
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"} {
		r := call("POST", "/demo/api/join", http.Header{"Content-Type": {ct}}, join)
		require.Equal(t, http.StatusUnsupportedMediaType, r.code, "Content-Type %q: %s", ct, r.body)
		require.Contains(t, r.body, "Content-Type must be application/json")
	}
	r := call("POST", "/demo/api/join", http.Header{"Content-Type": {"application/json; charset=utf-8"}}, join)
	require.Equal(t, http.StatusOK, r.code, r.body)
}
