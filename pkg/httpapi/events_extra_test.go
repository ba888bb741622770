package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
)

// TestHugeBodyRefusedUnread: a 100 MB body is answered 413 after about
// maxBodyBytes, and the server hangs up instead of reading the rest: the
// client manages to write only a small part of it.
func TestHugeBodyRefusedUnread(t *testing.T) {
	t.Parallel()
	s, _ := publishServer(t)
	const size = 100 << 20
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = fmt.Fprintf(conn, "POST /apps/%s/events?auth_key=%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", appID, appKey, size)
	require.NoError(t, err)

	written := make(chan int64, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		var n int64
		for n < size {
			k, err := conn.Write(chunk)
			n += int64(k)
			if err != nil {
				break
			}
		}
		written <- n
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	var n int64
	select {
	case n = <-written:
	case <-time.After(30 * time.Second):
		t.Fatal("the server kept reading the body")
	}
	// What got written is the server's 1 MiB cap, what it drains before
	// closing (256 KiB) and the kernel's socket buffers on both sides.
	require.Less(t, n, int64(size/4), "the client wrote %d bytes before the server hung up", n)
	t.Logf("client wrote %d of %d bytes before the server closed", n, size)
}

// FuzzEventBody feeds arbitrary bodies to the parsers of POST .../events
// and .../batch_events: they must never panic, and whatever they accept
// must obey Pusher's limits.
func FuzzEventBody(f *testing.F) {
	for _, seed := range []string{
		`{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}`,
		`{"name":"e","channel":"presence-a","data":"d","socket_id":"1.2","info":"user_count,subscription_count"}`,
		`{"name":"e","channel":"#server-to-user-7","data":"\u00e9"}`,
		`{"batch":[{"channel":"c","name":"e","data":"d","info":"subscription_count"},{"channel":"d","name":"e","data":""}]}`,
		`{"batch":null}`, `{"name":"e","data":null}`, `[]`, `null`, ``, `{"channels":[null]}`,
	} {
		f.Add([]byte(seed))
	}
	app := &apps.App{ID: "a", Key: "k", Secret: "s", Enabled: true, MaxEventChannelsAtOnce: 3, MaxEventBatchSize: 3, MaxEventPayloadInKb: 1}
	check := func(t *testing.T, ev *event) {
		t.Helper()
		if ev.name == "" || len(ev.name) > maxEventNameLength || len(ev.data) > maxEventPayload(app) ||
			len(ev.channels) == 0 || len(ev.channels) > maxChannels(app) {
			t.Fatalf("accepted an event out of bounds: %+v", ev)
		}
		if ev.socketID != "" && !validSocketIDForTest(ev.socketID) {
			t.Fatalf("accepted socket_id %q", ev.socketID)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if ev, err := parseEvent(body, app); err == nil {
			check(t, ev)
		} else if re := (*requestError)(nil); !errors.As(err, &re) || (re.code != 400 && re.code != 413) {
			t.Fatalf("parseEvent error %v is not a 400 or 413", err)
		}
		if evs, err := parseBatch(body, app); err == nil {
			if len(evs) == 0 || len(evs) > maxBatchSize(app) {
				t.Fatalf("accepted a batch of %d", len(evs))
			}
			for _, ev := range evs {
				check(t, ev)
				if len(ev.channels) != 1 {
					t.Fatalf("batch item with %d channels", len(ev.channels))
				}
			}
		} else if re := (*requestError)(nil); !errors.As(err, &re) || (re.code != 400 && re.code != 413) {
			t.Fatalf("parseBatch error %v is not a 400 or 413", err)
		}
	})
}

// FuzzPublishHandler sends arbitrary bodies, correctly signed, through the
// real handler on a real Redis to each publishing route: never a 5xx or a
// panic, and every 200 is JSON. (The mux's own answers, such as a redirect
// for a path with "." segments, are fine.)
func FuzzPublishHandler(f *testing.F) {
	f.Add(uint8(0), "c", []byte(`{"name":"e","data":"d","channels":["a","presence-b"],"info":"subscription_count,user_count"}`))
	f.Add(uint8(1), "c", []byte(`{"batch":[{"name":"e","data":"d","channel":"c","info":"user_count"}]}`))
	f.Add(uint8(2), "user-1", []byte(`{}`))
	f.Add(uint8(3), "presence-a", []byte(nil))
	f.Add(uint8(2), "x%2Fy", []byte(`{"a":`))
	srv := redistest.New(f)
	cfg := config.HTTPAPI{Common: config.Common{Redis: srv.URL(), Apps: publishApps(f)}, Addr: "127.0.0.1:0"}
	a, err := New(Options{Config: cfg})
	require.NoError(f, err)
	f.Cleanup(a.Stop)
	h := a.handler()
	f.Fuzz(func(t *testing.T, route uint8, name string, body []byte) {
		method, path := http.MethodPost, ""
		switch route % 4 {
		case 0:
			path = "/apps/" + appID + "/events"
		case 1:
			path = "/apps/" + appID + "/batch_events"
		case 2:
			path = "/apps/" + appID + "/users/" + name + "/terminate_connections"
		case 3:
			method, path, body = http.MethodGet, "/apps/"+appID+"/channels/"+name+"/users", nil
		}
		u, err := url.Parse(path)
		if err != nil || u.Path != path {
			return // not a path a client could send
		}
		req := httptest.NewRequest(method, "/", bytes.NewReader(body))
		req.URL = &url.URL{Path: path, RawQuery: signed(method, path, nil, body, appKey, appSecret, time.Now())}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code == 200 && !json.Valid(rec.Body.Bytes()):
			t.Fatalf("%s %q: 200 with a body that is not JSON: %q", method, path, rec.Body.String())
		case rec.Code >= 500:
			t.Fatalf("%s %q %q: %d %s", method, path, body, rec.Code, rec.Body.String())
		}
	})
}

// validSocketIDForTest is ^\d+\.\d+$ spelled independently of protocol.
func validSocketIDForTest(s string) bool {
	a, b, ok := strings.Cut(s, ".")
	digits := func(x string) bool { return x != "" && strings.Trim(x, "0123456789") == "" }
	return ok && digits(a) && digits(b)
}

// BenchmarkTriggerWithInfo measures trigger-with-info throughput through
// pusher-http-go against one httpapi on a single Redis: each request
// publishes on two channels and reads their counts in the same pipeline.
// Clients run in parallel (4 per GOMAXPROCS).
func BenchmarkTriggerWithInfo(b *testing.B) {
	s, _ := publishServer(b)
	info := "subscription_count,user_count"
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := s.pusherClient(b, appSecret)
		for pb.Next() {
			res, err := c.TriggerMultiWithParams([]string{"presence-room-1", "private-a"}, "bench", `{"n":1}`, pusher.TriggerParams{Info: &info})
			if err != nil {
				b.Error(err)
				return
			}
			if got := res.Channels["presence-room-1"].UserCount; got == nil || *got != 2 {
				b.Errorf("user_count %v", got)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "triggers/s")
}
