package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
)

// send sends a signed request with body as app-1.
func (s *testServer) send(t testing.TB, method, path, body string) response {
	t.Helper()
	return s.do(t, method, path, signed(method, path, nil, []byte(body), appKey, appSecret, time.Now()), []byte(body))
}

func decode(t testing.TB, r response) map[string]any {
	t.Helper()
	require.Equal(t, http.StatusOK, r.code, r.body)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.body), &m), r.body)
	return m
}

// TestAdmissionAPI walks the admission routes (README, Admission) against a real
// Redis: the apps file gives presence-room- a capacity of 2.
func TestAdmissionAPI(t *testing.T) {
	t.Parallel()
	s := startServer(t, config.Common{Redis: redistest.New(t).URL()})
	const path = "/apps/" + appID + "/channels/presence-room-1/admission"
	for _, u := range []string{"u1", "u2"} {
		m := decode(t, s.send(t, http.MethodPost, path, `{"user_id":"`+u+`"}`))
		require.Equal(t, "admitted", m["status"])
		require.Len(t, m["ticket"], 32)
		require.EqualValues(t, 30, m["expires_in"])
	}
	m := decode(t, s.send(t, http.MethodPost, path, `{"user_id":"u3"}`))
	require.Equal(t, map[string]any{"status": "waiting", "position": 1.0, "waiting": 1.0, "capacity": 2.0, "occupancy": 2.0}, m)
	m = decode(t, s.send(t, http.MethodPost, path, `{"user_id":"u4"}`))
	require.EqualValues(t, 2, m["position"])
	require.Equal(t, map[string]any{"capacity": 2.0, "occupancy": 2.0, "waiting": 2.0}, decode(t, s.send(t, http.MethodGet, path, "")))

	require.Equal(t, map[string]any{}, decode(t, s.send(t, http.MethodDelete, path, `{"user_id":"u1"}`)))
	m = decode(t, s.send(t, http.MethodPost, path, `{"user_id":"u3"}`))
	require.Equal(t, "admitted", m["status"], "the head takes the room u1 left")
	m = decode(t, s.send(t, http.MethodPost, path, `{"user_id":"u4"}`))
	require.EqualValues(t, 1, m["position"])

	capPath := "/apps/" + appID + "/channels/presence-room-1/capacity"
	require.Equal(t, map[string]any{"capacity": 3.0}, decode(t, s.send(t, http.MethodPut, capPath, `{"capacity": 3}`)))
	require.Equal(t, map[string]any{"capacity": 3.0, "occupancy": 3.0, "waiting": 0.0}, decode(t, s.send(t, http.MethodGet, path, "")))
	require.Equal(t, map[string]any{}, decode(t, s.send(t, http.MethodDelete, capPath, "")))
	require.EqualValues(t, 2, decode(t, s.send(t, http.MethodGet, path, ""))["capacity"])

	// A presence channel without a capacity admits everyone.
	m = decode(t, s.send(t, http.MethodPost, "/apps/"+appID+"/channels/presence-lobby/admission", `{"user_id":"anyone"}`))
	require.Equal(t, "admitted", m["status"])

	_, metrics := adminGet(t, s.app, "/metrics")
	require.Contains(t, metrics, `headcount_admission_admitted_total{app="app-1",how="direct"} 2`)
	require.Contains(t, metrics, `headcount_admission_admitted_total{app="app-1",how="promoted"} 2`)
}

// TestAdmissionBadInput: every malformed request is a 400 with a message
// and changes nothing.
func TestAdmissionBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t, config.Common{Redis: redistest.New(t).URL()})
	const base = "/apps/" + appID + "/channels/"
	for _, tc := range []struct{ method, path, body, want string }{
		{http.MethodPut, base + "presence-room-1/capacity", `{"capacity": 0}`, "from 1 to 1000000000, not 0"},
		{http.MethodPut, base + "presence-room-1/capacity", `{"capacity": -3}`, "from 1 to 1000000000"},
		{http.MethodPut, base + "presence-room-1/capacity", `{"capacity": 1000000001}`, "from 1 to 1000000000, not 1000000001"},
		{http.MethodPut, base + "presence-room-1/capacity", `{"capacity": 9223372036854775807}`, "from 1 to 1000000000"},
		{http.MethodPut, base + "presence-room-1/capacity", `{"capacity": 1.5}`, "whole number"},
		{http.MethodPut, base + "presence-room-1/capacity", `{}`, "Missing capacity"},
		{http.MethodPut, base + "presence-room-1/capacity", `nope`, "JSON object"},
		{http.MethodPut, base + "private-room/capacity", `{"capacity": 3}`, "presence channels only"},
		{http.MethodPost, base + "public-room/admission", `{"user_id":"u"}`, "presence channels only"},
		{http.MethodPost, base + "presence-room-1/admission", `{}`, "Missing user_id"},
		{http.MethodPost, base + "presence-room-1/admission", `{"user_id":""}`, "Missing user_id"},
		{http.MethodDelete, base + "presence-room-1/admission", ``, "JSON object"},
		{http.MethodPost, base + "presence-room-1/admission", `{"user_id":"` + strings.Repeat("x", 129) + `"}`, "over the limit of 128"},
		{http.MethodGet, base + "presence-room-" + strings.Repeat("x", 200) + "/admission", "", "Invalid channel name"},
	} {
		r := s.send(t, tc.method, tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, r.code, "%s %s %s: %s", tc.method, tc.path, tc.body, r.body)
		require.Contains(t, r.body, tc.want, "%s %s %s", tc.method, tc.path, tc.body)
	}
	require.Equal(t, map[string]any{"capacity": 2.0, "occupancy": 0.0, "waiting": 0.0}, decode(t, s.send(t, http.MethodGet, base+"presence-room-1/admission", "")))
	// Unsigned requests are refused like every /apps/ route.
	r := s.do(t, http.MethodPost, base+"presence-room-1/admission", "", []byte(`{"user_id":"u"}`))
	require.Equal(t, http.StatusUnauthorized, r.code)
}
