package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
)

// Client returns an HTTP client whose idle connections close with the test.
func Client(t testing.TB) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

// Response is a whole answer: status, body and headers.
type Response struct {
	Code   int
	Body   string
	Header http.Header
}

// Do sends method base+path?rawQuery with header and body and reads the
// whole answer; a "Host" entry in header sets the request's Host.
func Do(t testing.TB, base, method, path, rawQuery string, header http.Header, body []byte) Response {
	t.Helper()
	u := base + path
	if rawQuery != "" {
		u += "?" + rawQuery
	}
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	require.NoError(t, err)
	for k, vs := range header {
		if k == "Host" {
			req.Host = vs[0]
			continue
		}
		req.Header[k] = vs
	}
	resp, err := Client(t).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Response{Code: resp.StatusCode, Body: string(b), Header: resp.Header}
}

// Producer is a wsnode's counts.Recorder, stopped when the test ends.
type Producer struct {
	Rec   *counts.Recorder
	store *counts.Store
}

// NewProducer starts a Recorder named node on rdb.
func NewProducer(t *testing.T, rdb redis.UniversalClient, node string) *Producer {
	t.Helper()
	rec := counts.NewRecorder(rdb, node, counts.RecorderOptions{Heartbeat: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return &Producer{Rec: rec, store: counts.NewStore(rdb, keyspace.Space{})}
}

// Add applies deltas and waits until Redis shows want as app's occupied
// channels.
func (p *Producer) Add(t *testing.T, app string, deltas map[string]int64, want map[string]int64) {
	t.Helper()
	for ch, d := range deltas {
		p.Rec.Add(app, ch, d)
	}
	var got map[string]int64
	require.Eventually(t, func() bool {
		var err error
		got, err = p.store.Channels(context.Background(), app, "")
		return err == nil && fmt.Sprint(got) == fmt.Sprint(want)
	}, 10*time.Second, 10*time.Millisecond, "counts did not reach %v (last %v)", want, got)
}
