package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/lifecycle"
	"github.com/headcount/headcount/pkg/redisx"
)

// runApp runs the app in this process, as cmd/httpapi's main does, with
// the arguments after the program's name. HTTPAPI_TEST_NOFILE lowers the
// open-file limit (soft and hard) first, as `ulimit -n` would.
func runApp() int {
	if v := os.Getenv("HTTPAPI_TEST_NOFILE"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err == nil {
			err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "HTTPAPI_TEST_NOFILE:", err)
			return 3
		}
	}
	cfg, err := config.ParseHTTPAPI(os.Args[1:], os.LookupEnv, os.Stderr)
	return lifecycle.Main("httpapi", os.Stdout, os.Stderr, err, cfg.Common, func(log hclog.Logger, reg *prometheus.Registry) (lifecycle.Service, error) {
		return New(Options{Config: cfg, Logger: log, Registry: reg})
	})
}

// lowLimitApp is the app run in a child process under an open-file limit,
// with a JSON log, serving the default app (apps.DefaultID).
type lowLimitApp struct {
	addr, admin string
	log         *proctest.Buffer
}

func startLowLimitApp(t *testing.T, nofile int, args ...string) *lowLimitApp {
	t.Helper()
	srv := redistest.New(t)
	p := &lowLimitApp{log: &proctest.Buffer{}}
	cmd := exec.Command(os.Args[0], append([]string{"--redis", srv.URL(), "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "HTTPAPI_TEST_APP=1", "HTTPAPI_TEST_NOFILE="+strconv.Itoa(nofile))
	cmd.Stderr = p.log
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("httpapi log:\n%s", p.log.String())
		}
	})
	require.Eventually(t, func() bool { return len(p.lines("redis is reachable")) > 0 }, 10*time.Second, 10*time.Millisecond,
		"httpapi did not become ready:\n%s", p.log.String())
	l := p.lines("serving")[0]
	p.addr, p.admin = fmt.Sprint(l["addr"]), fmt.Sprint(l["admin_addr"])
	return p
}

// lines returns the log lines whose message contains msg.
func (p *lowLimitApp) lines(msg string) []map[string]any {
	return proctest.LogLines(p.log.String(), msg)
}

// adminGet GETs path on the admin port, giving up after 5 s.
func (p *lowLimitApp) adminGet(path string) (int, string) {
	return proctest.Get("http://"+p.admin+path, 5*time.Second)
}

// TestIdleConnectionsDoNotStarveTheProcess: under an open-file limit of
// 200, a client opening 250 keep-alive connections, each left idle after
// an unsigned GET /up, used to run the process out of descriptors (accept4:
// too many open files, over and over), so that a signed GET and /readyz
// went unanswered. Now the API port holds at most its derived cap, each
// connection past it takes the place of the one idle longest, and a signed
// GET (pusher-http-go, reading Redis) and /readyz are answered in time.
func TestIdleConnectionsDoNotStarveTheProcess(t *testing.T) {
	// Not parallel: its connections must be idle, not busy, when the cap
	// is met, and tests beside it slowed them into refusals.
	p := startLowLimitApp(t, 200)

	const idlers = 250 // more than the limit allows
	conns := make([]net.Conn, 0, idlers)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range idlers {
		c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = io.WriteString(c, "GET /up HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
	}
	answered := 0
	var unanswered []string // which connection, and what it read instead
	deadline := time.Now().Add(10 * time.Second)
	for i, c := range conns {
		_ = c.SetReadDeadline(deadline)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err != nil:
			unanswered = append(unanswered, fmt.Sprintf("%d: %v", i, err))
		case resp.StatusCode != http.StatusOK || resp.Close:
			unanswered = append(unanswered, fmt.Sprintf("%d: %s, close %v", i, resp.Status, resp.Close))
		default:
			answered++
		}
		if err == nil {
			_ = resp.Body.Close()
		}
	}

	client := &pusher.Client{AppID: apps.DefaultID, Key: apps.DefaultKey, Secret: apps.DefaultSecret, Host: p.addr,
		HTTPClient: &http.Client{Timeout: 5 * time.Second}}
	chans, err := client.Channels(pusher.ChannelsParams{})
	require.NoError(t, err, "a signed GET with %d connections opened", idlers)
	require.Empty(t, chans.Channels)
	status, body := p.adminGet("/readyz")
	require.Equal(t, http.StatusOK, status, "/readyz with %d connections opened: %s", idlers, body)
	require.Equal(t, idlers, answered, "every GET /up answered, keep-alive; not: %v", unanswered)

	l := p.lines("serving")[0]
	maxConns, _ := l["max_connections"].(float64)
	redisConns := 10*runtime.GOMAXPROCS(0) + redis.DefaultPipelinePoolSize // go-redis's pools
	require.EqualValues(t, config.MaxConnectionsFor(200, redisConns), maxConns, "derived from the limit: %v", l)
	require.Less(t, int(maxConns), idlers, "the test goes past the cap")

	status, metrics := p.adminGet("/metrics")
	require.Equal(t, http.StatusOK, status, metrics)
	m, err := metricstest.Parse(metrics)
	require.NoError(t, err)
	require.Equal(t, maxConns, m.Value("headcount_httpapi_max_connections"))
	require.LessOrEqual(t, m.Value("headcount_httpapi_port_connections"), maxConns)
	require.GreaterOrEqual(t, m.Value("headcount_httpapi_connections_closed_for_room_total", "state", "idle"), idlers-maxConns)
	require.Zero(t, m.Value("headcount_httpapi_connections_refused_total"), "idle connections made room")
	require.Zero(t, m.Value("headcount_httpapi_accept_errors_total"))

	log := p.log.String()
	require.NotContains(t, log, "too many open files")
	require.NotContains(t, log, "Accept error")
	require.NotEmpty(t, p.lines("closing the connections that waited longest"))
	require.LessOrEqual(t, len(p.lines("closing the connections that waited longest")), 2, "a warning per 10 s, not per connection")
}

// TestRedisConns: the room the default cap leaves for Redis is what the
// client's pools may open, in every mode, pool sizes set in the URL
// included.
func TestRedisConns(t *testing.T) {
	t.Parallel()
	cpus := runtime.GOMAXPROCS(0)
	for _, tc := range []struct {
		name string
		c    config.Common
		want int
	}{
		{"single", config.Common{Redis: "redis://127.0.0.1:1/0"}, 10*cpus + 10},
		{"pool size in the URL", config.Common{Redis: "redis://127.0.0.1:1/0?pool_size=7"}, 7 + 10},
		{"cluster of two seeds: three nodes at least", config.Common{RedisCluster: "127.0.0.1:1,127.0.0.1:2"}, 3 * 5 * cpus},
		{"cluster of four seeds", config.Common{RedisCluster: "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4"}, 4 * 5 * cpus},
		{"sentinel", config.Common{RedisSentinel: "127.0.0.1:1", RedisSentinelMaster: "m"}, 10*cpus + 10 + 10*cpus + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, err := redisx.NewClient(tc.c)
			require.NoError(t, err)
			defer rdb.Close()
			require.Equal(t, tc.want, redisConns(rdb, tc.c))
		})
	}
}
