package httpapi

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
)

// TestRefusedRequestsCloseTheirConnection: a request refused before its
// signature proved anything (unknown app, no or a bad signature, a
// disabled app) is answered with Connection: close and its connection
// closed; /up and signed requests keep theirs.
func TestRefusedRequestsCloseTheirConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	s := startServer(t, config.Common{Redis: srv.URL()})
	require.Eventually(t, s.app.ready, 10*time.Second, 10*time.Millisecond)
	path := "/apps/" + appID + "/channels"
	now := time.Now()
	for _, tc := range []struct {
		name, target string
		code         int
	}{
		{"unsigned", path, http.StatusUnauthorized},
		{"bad signature", path + "?" + signed(http.MethodGet, path, nil, nil, appKey, "wrong", now), http.StatusUnauthorized},
		{"stale", path + "?" + signed(http.MethodGet, path, nil, nil, appKey, appSecret, now.Add(-time.Hour)), http.StatusUnauthorized},
		{"disabled app", "/apps/" + offID + "/channels?" + signed(http.MethodGet, "/apps/"+offID+"/channels", nil, nil, offKey, offSecret, now), http.StatusForbidden},
		{"unknown app", "/apps/nope/channels", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", s.app.Addr())
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
			_, err = io.WriteString(c, "GET "+tc.target+" HTTP/1.1\r\nHost: x\r\n\r\n")
			require.NoError(t, err)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, tc.code, resp.StatusCode)
			require.True(t, resp.Close, "Connection: close")
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "the server closed the connection")
		})
	}

	c, err := net.Dial("tcp", s.app.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	br := bufio.NewReader(c)
	for _, target := range []string{"/up", "/up", path + "?" + signed(http.MethodGet, path, nil, nil, appKey, appSecret, time.Now()), "/up"} {
		_, err = io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, target)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, target)
		require.False(t, resp.Close, "%s keeps its connection", target)
	}
}
