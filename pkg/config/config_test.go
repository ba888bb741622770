package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/keyspace"
)

func env(m map[string]string) Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestPrecedenceDefaultsEnvFlags(t *testing.T) {
	c, err := ParseWSNode(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, ":6001", c.Addr)
	require.Equal(t, time.Second, c.Heartbeat)
	require.Equal(t, "redis://127.0.0.1:6379/0", c.Redis)
	require.NotEmpty(t, c.NodeID)
	require.NotNil(t, c.Apps.ByKey("app-key"))

	e := env(map[string]string{"HEADCOUNT_HEARTBEAT": "2s", "HEADCOUNT_ADDR": "127.0.0.1:7000", "HEADCOUNT_NODE_ID": "a"})
	c, err = ParseWSNode(nil, e, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, c.Heartbeat)
	require.Equal(t, "127.0.0.1:7000", c.Addr)

	c, err = ParseWSNode([]string{"--heartbeat", "250ms", "--node-id", "b"}, e, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, c.Heartbeat, "flags win over env")
	require.Equal(t, "b", c.NodeID)
	require.Equal(t, "127.0.0.1:7000", c.Addr, "env wins over defaults")
}

func TestErrorsNameTheSetting(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--redis", "http://x"}, nil, "--redis"},
		{[]string{"--redis-cluster", "a:1,nope"}, nil, "--redis-cluster"},
		{[]string{"--log-format", "xml"}, nil, "--log-format"},
		{[]string{"--log-level", "loud"}, nil, "--log-level"},
		{[]string{"--heartbeat", "0s"}, nil, "--heartbeat"},
		{[]string{"--node-id", "a{b}"}, nil, "--node-id"},
		{[]string{"--addr", "6001"}, nil, "--addr"},
		{[]string{"--apps-file", "/does/not/exist"}, nil, "--apps-file"},
		{nil, map[string]string{"HEADCOUNT_DRAIN": "soon"}, "HEADCOUNT_DRAIN"},
		{[]string{"--no-such-flag"}, nil, "no-such-flag"},
		{[]string{"--max-sockets", "many"}, nil, "max-sockets"},
		{nil, map[string]string{"HEADCOUNT_MAX_SOCKETS": "1e6"}, "HEADCOUNT_MAX_SOCKETS"},
	}
	for _, tc := range cases {
		_, err := ParseWSNode(tc.args, env(tc.env), io.Discard)
		require.Error(t, err, "%v %v", tc.args, tc.env)
		require.Contains(t, err.Error(), tc.want)
	}
}

func TestAllErrorsReportedTogether(t *testing.T) {
	_, _, err := ParseCleaner([]string{"--dead-after", "0s", "--lease-ttl", "1ms", "--log-format", "xml"}, env(nil), io.Discard)
	require.Error(t, err)
	for _, s := range []string{"--dead-after", "--lease-ttl", "--log-format"} {
		require.Contains(t, err.Error(), s)
	}
}

func TestAppsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "apps.json")
	require.NoError(t, os.WriteFile(p, []byte(`[{"id":"1","key":"k","secret":"s"}]`), 0o600))
	c, err := ParseHTTPAPI([]string{"--apps-file", p}, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "s", c.Apps.ByID("1").Secret)

	require.NoError(t, os.WriteFile(p, []byte(`[{"id":"1","key":"k"}]`), 0o600))
	_, err = ParseHTTPAPI([]string{"--apps-file", p}, env(nil), io.Discard)
	require.ErrorContains(t, err, "--apps-file")
	require.ErrorContains(t, err, "secret")
}

// TestSoketiAppEnv: soketi's default-app names serve the app from the
// environment; beside an apps file, which holds every app, they and
// headcount's own HEADCOUNT_APP_* are refused by name rather than ignored.
func TestSoketiAppEnv(t *testing.T) {
	c, err := ParseHTTPAPI(nil, env(map[string]string{"SOKETI_DEFAULT_APP_ID": "foo", "SOKETI_DEFAULT_APP_KEY": "k", "SOKETI_DEFAULT_APP_SECRET": "s"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "s", c.Apps.ByID("foo").Secret)

	p := filepath.Join(t.TempDir(), "apps.json")
	require.NoError(t, os.WriteFile(p, []byte(`[{"id":"1","key":"k","secret":"s"}]`), 0o600))
	_, err = ParseHTTPAPI([]string{"--apps-file", p}, env(map[string]string{"SOKETI_DEFAULT_APP_KEY": "k2"}), io.Discard)
	require.ErrorContains(t, err, "SOKETI_DEFAULT_APP_KEY: set beside --apps-file")
	_, err = ParseHTTPAPI([]string{"--apps-file", p}, env(map[string]string{"HEADCOUNT_APP_ID": "x", "HEADCOUNT_APP_SECRET": "y"}), io.Discard)
	require.ErrorContains(t, err, "HEADCOUNT_APP_ID, HEADCOUNT_APP_SECRET: set beside --apps-file")

	_, err = ParseWSNode(nil, env(map[string]string{"HEADCOUNT_APP_KEY": "a", "SOKETI_DEFAULT_APP_KEY": "b"}), io.Discard)
	require.ErrorContains(t, err, "HEADCOUNT_APP_KEY and SOKETI_DEFAULT_APP_KEY are both set")
}

func TestHelpAndSubcommand(t *testing.T) {
	_, err := ParseHTTPAPI([]string{"-h"}, env(nil), io.Discard)
	require.True(t, errors.Is(err, flag.ErrHelp))
	_, rest, err := ParseCleaner([]string{"--dead-after", "1s", "audit", "--repair"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "audit --repair", strings.Join(rest, " "))
}

func TestClusterSeeds(t *testing.T) {
	c, err := ParseHTTPAPI([]string{"--redis-cluster", "127.0.0.1:7000, 127.0.0.1:7001"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"127.0.0.1:7000", "127.0.0.1:7001"}, c.ClusterSeeds())
}

func TestHTTPAPIListingSettings(t *testing.T) {
	c, err := ParseHTTPAPI(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, c.StaleAfter)
	require.Equal(t, time.Second, c.ListingCacheTTL)
	require.Equal(t, 500*time.Millisecond, c.ListingLockTTL)

	c, err = ParseHTTPAPI([]string{"--listing-cache-ttl", "-1s", "--stale-after", "2s"}, env(map[string]string{"HEADCOUNT_LISTING_LOCK_TTL": "1s"}), io.Discard)
	require.NoError(t, err, "a negative cache TTL turns the cache off; the lock TTL then has no upper bound")
	require.Equal(t, 2*time.Second, c.StaleAfter)
	require.Equal(t, time.Second, c.ListingLockTTL)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listing-lock-ttl", "1s"}, "--listing-lock-ttl: 1s must be below --listing-cache-ttl 1s"},
		{[]string{"--listing-lock-ttl", "0s"}, "--listing-lock-ttl: 0s must be positive"},
		{[]string{"--stale-after", "0s"}, "--stale-after"},
	} {
		_, err := ParseHTTPAPI(tc.args, env(nil), io.Discard)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
}

// TestCleanerLeaseTTLZeroTurnsTheLeaseOff: exactly 0 is accepted (no
// lease, tests only); negative and too short stay errors.
func TestCleanerLeaseTTLZeroTurnsTheLeaseOff(t *testing.T) {
	c, _, err := ParseCleaner([]string{"--lease-ttl", "0"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.LeaseTTL)
	c, _, err = ParseCleaner(nil, env(map[string]string{"HEADCOUNT_LEASE_TTL": "0s"}), io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.LeaseTTL)

	for _, v := range []string{"-1s", "-1ns", "29ms"} {
		_, _, err := ParseCleaner([]string{"--lease-ttl", v}, env(nil), io.Discard)
		require.ErrorContains(t, err, "--lease-ttl", v)
	}
}

// TestCleanerLivenessFlags: the liveness check runs every 100 ms with a
// 300 ms grace by default; 0 turns it off; a negative interval, and a
// grace that is negative or past dead-after, are refused by name.
func TestCleanerLivenessFlags(t *testing.T) {
	c, _, err := ParseCleaner(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, c.LivenessInterval)
	require.Equal(t, 300*time.Millisecond, c.LivenessGrace)
	c, _, err = ParseCleaner(nil, env(map[string]string{"HEADCOUNT_LIVENESS_INTERVAL": "0s"}), io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.LivenessInterval)

	for _, tc := range []struct{ args []string }{
		{[]string{"--liveness-interval", "-1ms"}},
		{[]string{"--liveness-grace", "-1ms"}},
		{[]string{"--dead-after", "1s", "--liveness-grace", "2s"}},
	} {
		_, _, err := ParseCleaner(tc.args, env(nil), io.Discard)
		require.ErrorContains(t, err, tc.args[len(tc.args)-2], tc.args)
	}
}

// TestHTTPAPITimeouts: the connection timeouts have finite defaults, come
// from env then flags, and a timeout that is zero, negative or a write
// timeout not above the read timeout is refused by name.
func TestHTTPAPITimeouts(t *testing.T) {
	c, err := ParseHTTPAPI(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 120*time.Second, c.IdleTimeout)
	require.Equal(t, 30*time.Second, c.ReadTimeout)
	require.Equal(t, 60*time.Second, c.WriteTimeout)

	e := env(map[string]string{"HEADCOUNT_IDLE_TIMEOUT": "1m", "HEADCOUNT_READ_TIMEOUT": "5s", "HEADCOUNT_WRITE_TIMEOUT": "10s"})
	c, err = ParseHTTPAPI([]string{"--read-timeout", "2s"}, e, io.Discard)
	require.NoError(t, err)
	require.Equal(t, time.Minute, c.IdleTimeout)
	require.Equal(t, 2*time.Second, c.ReadTimeout, "flags win over env")
	require.Equal(t, 10*time.Second, c.WriteTimeout)

	for _, tc := range []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{[]string{"--idle-timeout", "0s"}, nil, []string{"--idle-timeout: 0s must be positive"}},
		{[]string{"--read-timeout", "-1s", "--write-timeout", "0s"}, nil, []string{"--read-timeout: -1s must be positive", "--write-timeout: 0s must be positive"}},
		{[]string{"--read-timeout", "1m"}, nil, []string{"--write-timeout: 1m0s must be above --read-timeout 1m0s"}},
		{nil, map[string]string{"HEADCOUNT_WRITE_TIMEOUT": "forever"}, []string{"HEADCOUNT_WRITE_TIMEOUT"}},
	} {
		_, err := ParseHTTPAPI(tc.args, env(tc.env), io.Discard)
		for _, w := range tc.want {
			require.ErrorContains(t, err, w, tc.args)
		}
	}
}

// --max-sockets defaults to 0 (derive from the open-file limit) and is read
// from the environment and flags like every setting.
func TestMaxSockets(t *testing.T) {
	c, err := ParseWSNode(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.MaxSockets)
	e := env(map[string]string{"HEADCOUNT_MAX_SOCKETS": "5000"})
	c, err = ParseWSNode(nil, e, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 5000, c.MaxSockets)
	c, err = ParseWSNode([]string{"--max-sockets", "-1"}, e, io.Discard)
	require.NoError(t, err)
	require.Equal(t, -1, c.MaxSockets, "flags win; negative means derive")

	for limit, want := range map[uint64]int{
		150:        86,  // 150 - 64
		100:        50,  // half the limit, not 100 - 64
		1024:       922, // 1024 - 102: a tenth is more than 64
		20000:      18000,
		1 << 20:    943719,
		^uint64(0): 989560464999, // RLIM_INFINITY, read as 2^40: no cap worth the name
	} {
		require.Equal(t, want, MaxSocketsFor(limit), "limit %d", limit)
	}
	limit, ok := OpenFileLimit()
	require.True(t, ok)
	require.Positive(t, limit)
}

func TestRedisPrefix(t *testing.T) {
	c, err := ParseHTTPAPI(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, keyspace.DefaultPrefix, c.RedisPrefix)

	c, err = ParseHTTPAPI(nil, env(map[string]string{"HEADCOUNT_REDIS_PREFIX": "staging"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "staging", c.RedisPrefix)

	w, err := ParseWSNode([]string{"--redis-prefix", "blue-2"}, env(map[string]string{"HEADCOUNT_REDIS_PREFIX": "staging"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "blue-2", w.RedisPrefix, "the flag wins over the environment")

	for _, bad := range []string{"", "a:b", "{a}", "a}", "a b", "a\tb"} {
		_, _, err := ParseCleaner([]string{"--redis-prefix", bad}, env(nil), io.Discard)
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), "--redis-prefix")
		require.Contains(t, err.Error(), `must be non-empty, without '{', '}', ':' or whitespace`)
	}
}

// TestCleanerNodeID: a cleaner's name is generated unless given, and is
// checked as a wsnode's is.
func TestCleanerNodeID(t *testing.T) {
	c, _, err := ParseCleaner(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.NotEmpty(t, c.NodeID)
	c, _, err = ParseCleaner([]string{"--node-id", "cleaner-1"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "cleaner-1", c.NodeID)
	_, _, err = ParseCleaner([]string{"--node-id", "a/b"}, env(nil), io.Discard)
	require.ErrorContains(t, err, "--node-id")
}

// TestEveryProblemAtOnce: a bad flag value, an unknown flag, a stray word,
// a bad environment value and the validation errors of the other settings
// are all reported by one run, each naming its setting.
func TestEveryProblemAtOnce(t *testing.T) {
	_, err := ParseWSNode([]string{"--drain", "abc", "--bogus", "--heartbeat=-1s", "--redis", "localhost:6379", "--log-format", "xml", "--max-sockets", "lots", "start"},
		env(map[string]string{"HEADCOUNT_USER_AUTH_TIMEOUT": "forever"}), io.Discard)
	require.Error(t, err)
	for _, want := range []string{
		`--drain: "abc" is not a duration`,
		"--bogus: no such flag",
		"--heartbeat: -1s must be positive",
		"did you mean redis://localhost:6379?",
		`--log-format: "xml"`,
		`--max-sockets: "lots" is not an integer`,
		`unexpected argument "start"`,
		`HEADCOUNT_USER_AUTH_TIMEOUT: "forever" is not a duration`,
	} {
		require.Contains(t, err.Error(), want)
	}
	_, err = ParseWSNode([]string{"---x", "-=y", "--drain", "abc"}, env(nil), io.Discard)
	require.ErrorContains(t, err, "bad flag syntax: ---x")
	require.ErrorContains(t, err, "bad flag syntax: -=y")
	require.ErrorContains(t, err, `--drain: "abc"`)
	_, err = ParseHTTPAPI([]string{"--redis-tls=maybe", "--addr", "nowhere"}, env(nil), io.Discard)
	require.ErrorContains(t, err, `--redis-tls: "maybe" is not a boolean`)
	require.ErrorContains(t, err, `--addr: "nowhere"`)
}

func TestRedisSchemeHint(t *testing.T) {
	for in, hint := range map[string]bool{"localhost:6379": true, "10.0.0.7:6379": true, "[::1]:6379": true,
		"localhost": false, "user:pw@host:6379": false, "pw@host:6379": false, "http://x:1": false} {
		_, err := ParseWSNode([]string{"--redis", in}, env(nil), io.Discard)
		require.ErrorContains(t, err, "--redis", in)
		if hint {
			require.ErrorContains(t, err, "did you mean redis://"+in+"?")
		} else {
			require.NotContains(t, err.Error(), "did you mean", in)
		}
	}
}

// TestFlagsAfterTheSubcommand: the cleaner's flags are read wherever they
// stand; what is not one of them, from the subcommand on, is left to it.
func TestFlagsAfterTheSubcommand(t *testing.T) {
	for _, args := range [][]string{
		{"--dead-after", "1s", "audit", "--repair"},
		{"audit", "--dead-after", "1s", "--repair"},
		{"audit", "--repair", "--dead-after=1s"},
	} {
		c, rest, err := ParseCleaner(args, env(nil), io.Discard)
		require.NoError(t, err, args)
		require.Equal(t, []string{"audit", "--repair"}, rest, args)
		require.Equal(t, time.Second, c.DeadAfter, args)
	}
	_, rest, err := ParseCleaner([]string{"audit", "--", "--dead-after", "x"}, env(nil), io.Discard)
	require.NoError(t, err, "after -- nothing is a flag")
	require.Equal(t, []string{"audit", "--dead-after", "x"}, rest)
	_, _, err = ParseCleaner([]string{"--repair", "audit"}, env(nil), io.Discard)
	require.ErrorContains(t, err, "--repair: no such flag", "before the subcommand, only the cleaner's flags")
}

func TestVersionAndHelp(t *testing.T) {
	_, err := ParseWSNode([]string{"--drain", "x", "--version"}, env(map[string]string{"HEADCOUNT_HEARTBEAT": "x"}), io.Discard)
	require.ErrorIs(t, err, ErrVersion, "--version answers whatever else is wrong")
	_, _, err = ParseCleaner([]string{"audit", "--version"}, env(nil), io.Discard)
	require.ErrorIs(t, err, ErrVersion)
	_, err = ParseWSNode([]string{"version"}, env(nil), io.Discard)
	require.ErrorContains(t, err, "did you mean --version?")

	var out strings.Builder
	_, _, err = ParseCleaner([]string{"--help"}, env(nil), &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, out.String(), "Commands:\n  audit [--repair]")
	require.Contains(t, out.String(), "  --dead-after duration\n")
	require.Contains(t, out.String(), "(env HEADCOUNT_DEAD_AFTER) (default 3s)")
	require.Contains(t, out.String(), "  --version\n")
	out.Reset()
	_, err = ParseWSNode([]string{"-h"}, env(map[string]string{"HEADCOUNT_REDIS": "redis://u:hunter2@h:1"}), &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.NotContains(t, out.String(), "Commands:")
	require.NotContains(t, out.String(), "hunter2", "the usage shows defaults, never a password")
	require.Contains(t, out.String(), "  --redis URL\n")
}

// --transport defaults to the event loop on Linux, is read from the
// environment and flags, and refuses anything but the two transports.
func TestTransport(t *testing.T) {
	c, err := ParseWSNode(nil, env(nil), io.Discard)
	require.NoError(t, err)
	want := TransportGoroutine
	if runtime.GOOS == "linux" {
		want = TransportEventLoop
	}
	require.Equal(t, want, c.Transport)
	c, err = ParseWSNode(nil, env(map[string]string{"HEADCOUNT_TRANSPORT": "goroutine"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, TransportGoroutine, c.Transport)
	_, err = ParseWSNode([]string{"--transport", "epoll"}, env(nil), io.Discard)
	require.ErrorContains(t, err, `--transport: "epoll" is not "eventloop" or "goroutine"`)
}

// --writers defaults to 0 (half the CPUs, at least one), is read from the
// environment and flags, and refuses a negative count.
func TestWriters(t *testing.T) {
	c, err := ParseWSNode(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.Writers)
	c, err = ParseWSNode(nil, env(map[string]string{"HEADCOUNT_WRITERS": "3"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 3, c.Writers)
	_, err = ParseWSNode([]string{"--writers", "-1"}, env(nil), io.Discard)
	require.ErrorContains(t, err, "--writers: -1 is negative")
	for procs, want := range map[int]int{1: 1, 2: 1, 3: 1, 4: 2, 16: 8} {
		require.Equal(t, want, WritersFor(procs), "on %d CPUs", procs)
	}
}

func TestAdvertiseHost(t *testing.T) {
	c, err := ParseWSNode(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Empty(t, c.AdvertiseHost)
	e := env(map[string]string{"HEADCOUNT_ADVERTISE_HOST": "10.0.0.7"})
	c, err = ParseWSNode(nil, e, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.7", c.AdvertiseHost)
	c, err = ParseWSNode([]string{"--advertise-host", "fd00::7"}, e, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "fd00::7", c.AdvertiseHost, "flags win; IPv6 unbracketed")
	for _, bad := range []string{"10.0.0.7:9601", "[fd00::7]", "http://x", "a b", "x:y"} {
		_, err = ParseWSNode([]string{"--advertise-host", bad}, env(nil), io.Discard)
		require.ErrorContains(t, err, "--advertise-host", bad)
	}
}

// TestExitAnchor: --exit-anchor is on unless the environment or the flag
// turns it off, the flag winning.
func TestExitAnchor(t *testing.T) {
	c, err := ParseWSNode(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.True(t, c.ExitAnchor)
	off := env(map[string]string{"HEADCOUNT_EXIT_ANCHOR": "false"})
	c, err = ParseWSNode(nil, off, io.Discard)
	require.NoError(t, err)
	require.False(t, c.ExitAnchor)
	c, err = ParseWSNode([]string{"--exit-anchor=true"}, off, io.Discard)
	require.NoError(t, err)
	require.True(t, c.ExitAnchor, "the flag wins")
	_, err = ParseWSNode([]string{"--exit-anchor=maybe"}, env(nil), io.Discard)
	require.ErrorContains(t, err, "--exit-anchor")
}

// TestHistoryBudget: --history-budget-mb defaults to history's budget,
// the environment and the flag set it in that order, and a value out of
// bounds is refused before anything dials.
func TestHistoryBudget(t *testing.T) {
	c, err := ParseHTTPAPI(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(history.DefaultBudget), c.HistoryBudget())

	w, err := ParseWSNode([]string{"--history-budget-mb", "3"}, env(map[string]string{"HEADCOUNT_HISTORY_BUDGET_MB": "2"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(3<<20), w.HistoryBudget(), "the flag wins over the environment")
	c, err = ParseHTTPAPI(nil, env(map[string]string{"HEADCOUNT_HISTORY_BUDGET_MB": "2"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(2<<20), c.HistoryBudget())

	for _, bad := range []string{"0", "-1", "65537"} {
		_, err := ParseWSNode([]string{"--history-budget-mb", bad, "--redis", "redis://127.0.0.1:1/0"}, env(nil), io.Discard)
		require.ErrorContains(t, err, "--history-budget-mb: must be 1 to 65536, not "+bad)
	}
}
