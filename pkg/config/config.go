package config

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/appsdb"
	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
)

// Common holds the settings every binary has.
type Common struct {
	// Redis is a redis://[user:password@]host:port[/db] URL, rediss:// for
	// TLS; used when neither RedisCluster nor RedisSentinel is set.
	Redis string
	// RedisCluster, non-empty, means Redis Cluster mode: comma-separated
	// host:port seeds, or a redis[s]://[user:password@]host:port URL with
	// more seeds as addr= parameters (redis.ParseClusterURL).
	RedisCluster string
	// RedisSentinel, non-empty, means Sentinel mode: the comma-separated
	// host:port addresses of the sentinels that monitor RedisSentinelMaster.
	RedisSentinel string
	// RedisSentinelMaster is the name the sentinels know the master by;
	// required with RedisSentinel.
	RedisSentinelMaster string
	// RedisSentinelPassword authenticates to the sentinels themselves;
	// empty means they need none.
	RedisSentinelPassword string
	// RedisSentinelPasswordFile is a file holding the sentinels' password
	// instead, re-read when it changes as RedisPasswordFile is.
	RedisSentinelPasswordFile string
	// RedisSentinelUsername is the sentinels' own ACL user, with
	// RedisSentinelPassword; empty for none.
	RedisSentinelUsername string
	// RedisUsername and RedisPassword authenticate to the Redis servers (the
	// master in Sentinel mode, every node in Cluster mode), instead of the
	// URL's user and password. Empty means the URL's, or none.
	RedisUsername string
	RedisPassword string
	// RedisPasswordFile is a file holding the password instead: re-read when
	// it changes, so a rotated Kubernetes Secret needs no restart.
	RedisPasswordFile string
	// RedisTLS turns TLS to Redis on in every mode; a rediss:// URL turns it
	// on by itself. Sentinel mode and bare Cluster seeds need it for TLS.
	RedisTLS bool
	// RedisTLSCA is a PEM file of the CAs that sign the servers'
	// certificates; empty means the system's roots.
	RedisTLSCA string
	// RedisTLSCert and RedisTLSKey are PEM files of a client certificate and
	// its key, for servers that require one (mutual TLS); both or neither.
	RedisTLSCert string
	RedisTLSKey  string
	// RedisLogger and RedisRegisterer receive what redisx reports about
	// the TLS and password files it re-reads. They are no settings: each
	// binary's app package sets its own before it builds a client; nil
	// discards.
	RedisLogger     hclog.Logger
	RedisRegisterer prometheus.Registerer
	// AppsFile is a JSON apps file; empty means one app from the environment.
	AppsFile string
	// AppsDB is a database URL (postgres:// or mysql://) whose apps table
	// (AppsDBTable) holds the apps, as soketi's SQL app managers keep them
	// (package appsdb); soketi's SOKETI_APP_MANAGER_DRIVER and SOKETI_DB_*
	// variables say the same when neither it nor AppsFile is set.
	AppsDB      string
	AppsDBTable string
	// AppsRefresh is how often the apps' source is read for changes
	// (appreload; a file's changes are also seen at once by fsnotify).
	AppsRefresh time.Duration
	// AdminAddr serves /metrics, /healthz and /readyz; empty disables it.
	AdminAddr string
	// LogLevel is trace, debug, info, warn or error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string
	// RedisPrefix starts every Redis key and channel name the binary uses,
	// so deployments with different prefixes can share one Redis. It must
	// be the same in every binary of one deployment; keyspace.DefaultPrefix
	// unless set (empty is refused).
	RedisPrefix string
	// SliceSize bounds the contribution fields one Redis script of a reap,
	// an audit or a republish handles (counts.Store.SliceSize), so no
	// script's time grows with an app's size; 0 means counts'
	// default. Tests make it tiny so every operation takes many slices.
	SliceSize int
	// HistoryBudgetMB bounds, in MiB, each app's channel histories
	// (history.Options.Budget), which every publisher holds them to: set
	// it alike in the wsnodes and the HTTP API.
	HistoryBudgetMB int

	// Apps is filled in by validation from AppsFile or the environment;
	// AppsSource is where its reloads read (nil: the environment, which a
	// running process cannot read anew).
	Apps       *apps.Registry
	AppsSource apps.Source
	// AppsIgnored names, one sentence each, the settings of the apps'
	// source that are set but not read (soketi's app cache variables);
	// the binaries warn of them at start.
	AppsIgnored []string

	// redisExplicit: --redis was given (flag or environment), not defaulted.
	redisExplicit bool
}

// ClusterSeeds returns the Redis Cluster seed addresses, of either form of
// RedisCluster, or nil in the other modes or when the URL does not parse.
func (c Common) ClusterSeeds() []string {
	if c.clusterURL() {
		if o, err := redis.ParseClusterURL(strings.TrimSpace(c.RedisCluster)); err == nil {
			return o.Addrs
		}
		return nil
	}
	return splitList(c.RedisCluster)
}

// WSNode is the configuration of cmd/wsnode.
type WSNode struct {
	Common
	// Addr is where the WebSocket endpoint /app/{key} listens.
	Addr string
	// NodeID names this process in Redis; unique per process start by default.
	NodeID string
	// Heartbeat is how often the node refreshes its last-seen time.
	Heartbeat time.Duration
	// Drain is the window over which SIGTERM closes sockets.
	Drain time.Duration
	// UserAuthTimeout is how long a socket of an app with
	// enableUserAuthentication may stay without signing in (or holding a
	// private or presence subscription) before it is closed with 4009.
	UserAuthTimeout time.Duration
	// MaxSockets caps the connections open on the WebSocket port at once,
	// handshaking or upgraded; connections past it are answered 503 and
	// closed. Zero or negative means MaxSocketsFor(the open-file limit).
	MaxSockets int
	// Transport is how the node serves its sockets: TransportEventLoop (a
	// loop per core watches every socket; Linux only) or
	// TransportGoroutine (a goroutine per socket, coder/websocket's stack).
	Transport string
	// Writers is how many goroutines send queued frames to sockets. Zero
	// means WritersFor(GOMAXPROCS); negative is refused.
	Writers int
	// AdvertiseHost is the host (a name or an IP, no port) at which the
	// cleaners reach this node's admin port to watch it (GET /liveness).
	// Empty means the admin listener's host when that is a specific IP;
	// otherwise the node registers no address and is not watched.
	AdvertiseHost string
	// ExitAnchor keeps child processes that share this node's descriptors
	// and memory, so a kill ends the node's Redis and admin connections at
	// once, before the kernel frees its memory and walks its descriptors
	// (package exitorder's StartAnchor).
	ExitAnchor bool
}

// WritersFor is the default --writers on procs CPUs: half of them, at
// least one. A writer never waits for a client, so its time is all the
// kernel's send path (on loopback, the receiver's side too); writers on
// every core leave none to the loops reading sockets, the handlers, and
// whatever else shares the machine. On 2 CPUs with the clients of 10,000
// subscribers on the same machine, one writer per node delivered at
// p50 96 ms against 136 ms for two (soketi 88 ms, same run); with the
// node on a CPU of its own, the two tied.
func WritersFor(procs int) int { return max(1, procs/2) }

// The WebSocket transports (--transport).
const (
	TransportEventLoop = "eventloop"
	TransportGoroutine = "goroutine"
)

// DefaultTransport is --transport's default: the event loop where it
// exists (Linux), else the goroutine per socket.
func DefaultTransport() string {
	if runtime.GOOS == "linux" {
		return TransportEventLoop
	}
	return TransportGoroutine
}

// Cleaner is the configuration of cmd/cleaner.
type Cleaner struct {
	Common
	// NodeID names this cleaner where the lease holder is shown (the
	// dashboard, GET .../status); unique per process start by default.
	NodeID string
	// DeadAfter is how old a node's last-seen may be before it is reaped.
	DeadAfter time.Duration
	// ScanInterval is how often the active cleaner looks for stale nodes.
	ScanInterval time.Duration
	// LeaseTTL is how long the active cleaner's lease lives unrenewed. Zero
	// means no lease: the cleaner is always active, alongside any other
	// (tests only: they show that reaping twice at once is harmless).
	LeaseTTL time.Duration
	// LivenessInterval is how often the active cleaner checks which nodes'
	// liveness subscriptions vanished (their process died, so Redis closed
	// their connections). Zero turns the check off: nodes are reaped only
	// once their last-seen is DeadAfter old.
	LivenessInterval time.Duration
	// LivenessGrace is how old a node's last-seen must be, besides its
	// liveness subscription having vanished, for it to be reaped before
	// DeadAfter.
	LivenessGrace time.Duration
}

// HTTPAPI is the configuration of cmd/httpapi.
type HTTPAPI struct {
	Common
	// Addr is where the Pusher HTTP API listens.
	Addr string
	// StaleAfter is the last-seen age from which a node counts as stale in
	// the X-Headcount-Stale-Nodes header; zero means 3s, the cleaner's
	// default dead-after (set it to the cleaner's --dead-after).
	StaleAfter time.Duration
	// ListingCacheTTL is how long a full channel listing, computed once
	// across all replicas, is reused; a listing is at most this old. Zero
	// means 1s; negative turns the shared cache off.
	ListingCacheTTL time.Duration
	// ListingLockTTL is how long the other replicas wait for a replica that
	// died while computing a listing; below ListingCacheTTL. Zero means 500ms.
	ListingLockTTL time.Duration
	// Dashboard serves the live dashboard (/dashboard) and the demo room
	// (/demo). Off by default: their pages and their /dashboard/api and
	// /demo/api handlers answer without a signature and show app data
	// (browsers only under DashboardHosts' names, from the same origin).
	Dashboard bool
	// DemoWS is the wsnode host:port the demo room's pusher-js connects to
	// (an empty host means the page's own host). Only the demo page uses it.
	DemoWS string
	// DashboardHosts lists, comma-separated, more host names the dashboard
	// and demo pages answer to (the Host header, port aside). Loopback
	// names, IP addresses and the host of Addr always are; any other Host
	// is refused, so a hostile page cannot reach them by DNS rebinding.
	// Empty means none more.
	DashboardHosts string
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request before the server closes it; zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ReadTimeout bounds reading a whole request, headers and body, from
	// its first byte; zero means DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds everything after a request's headers: reading its
	// body, the handler and writing the answer; above ReadTimeout. Zero
	// means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// MaxConnections caps the connections open on the API port at once. At
	// the cap a new connection takes the place of the one that has waited
	// longest for a request (a keep-alive connection between requests, say),
	// and is refused with 503 when every one is busy. Zero means
	// MaxConnectionsFor(the open-file limit, the Redis connections).
	MaxConnections int
}

// The httpapi's connection timeouts. Idle is above the keep-alive pools of
// the clients that call the API (Go's http.Transport, pusher-http-go's
// default, keeps idle connections 90 s; Node.js's agent 5 s) and of load
// balancers in front of it (60 s on AWS ALB and nginx), so the client side
// closes an idle connection first and never sends a request on one the
// server is closing: a POST lost that way cannot be retried safely. Read
// is ample for Pusher's largest request (a batch of 10 events of 10 KB,
// ~100 KB) and lets even a 1 MiB body arrive at 35 KB/s. Write covers a
// body read to the end of Read, the slowest handler (5 s of Redis work,
// listing waits included) and sending a listing of 100,000 channels (a
// few MB) to a slow client.
const (
	DefaultIdleTimeout  = 120 * time.Second
	DefaultReadTimeout  = 30 * time.Second
	DefaultWriteTimeout = 60 * time.Second
)

// DashboardHostList returns DashboardHosts' names, lowercased.
func (c HTTPAPI) DashboardHostList() []string {
	var hosts []string
	for _, h := range strings.Split(c.DashboardHosts, ",") {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// Env is how configuration reads the environment: os.LookupEnv in main.
// A setting's variable set to "" counts as unset; the default app's
// credential variables count as set even then (apps.FromEnv).
type Env = apps.Lookup

func defaultCommon(adminAddr string) Common {
	return Common{
		Redis:     "redis://127.0.0.1:6379/0",
		AdminAddr: adminAddr,
		LogLevel:  "info",
		LogFormat: "text",

		RedisPrefix:     keyspace.DefaultPrefix,
		HistoryBudgetMB: history.DefaultBudget >> 20,
		AppsRefresh:     2 * time.Second,
		AppsDBTable:     appsdb.DefaultTable,
	}
}

// MaxHistoryBudgetMB is the largest --history-budget-mb: 64 GiB, past
// any one Redis's memory.
const MaxHistoryBudgetMB = 64 << 10

// HistoryBudget is --history-budget-mb in bytes.
func (c Common) HistoryBudget() int64 { return int64(c.HistoryBudgetMB) << 20 }

// Default admin addresses, one per binary so they can share a host.
const (
	DefaultWSNodeAdmin  = ":9601"
	DefaultCleanerAdmin = ":9602"
	DefaultHTTPAPIAdmin = ":9603"
)

// DefaultWSNode returns the wsnode defaults (NodeID is generated).
func DefaultWSNode() WSNode {
	return WSNode{
		Common:    defaultCommon(DefaultWSNodeAdmin),
		Addr:      ":6001",
		NodeID:    NewNodeID(),
		Heartbeat: time.Second,
		Drain:     10 * time.Second,
		// soketi's userAuthenticationTimeout.
		UserAuthTimeout: 30 * time.Second,
		Transport:       DefaultTransport(),
		ExitAnchor:      true,
	}
}

// DefaultCleaner returns the cleaner defaults.
func DefaultCleaner() Cleaner {
	return Cleaner{
		Common:       defaultCommon(DefaultCleanerAdmin),
		NodeID:       NewNodeID(),
		DeadAfter:    3 * time.Second,
		ScanInterval: 500 * time.Millisecond,
		LeaseTTL:     3 * time.Second,

		LivenessInterval: 100 * time.Millisecond,
		LivenessGrace:    300 * time.Millisecond,
	}
}

// DefaultHTTPAPI returns the httpapi defaults.
func DefaultHTTPAPI() HTTPAPI {
	return HTTPAPI{
		Common:          defaultCommon(DefaultHTTPAPIAdmin),
		Addr:            ":8080",
		StaleAfter:      3 * time.Second,
		ListingCacheTTL: time.Second,
		ListingLockTTL:  500 * time.Millisecond,
		DemoWS:          "127.0.0.1:6001",
		IdleTimeout:     DefaultIdleTimeout,
		ReadTimeout:     DefaultReadTimeout,
		WriteTimeout:    DefaultWriteTimeout,
	}
}

// NewNodeID returns hostname-<8 hex digits>: readable in logs, unique per start.
func NewNodeID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if nodeIDChar(r) {
			return r
		}
		return '-'
	}, host)
	if host == "" {
		host = "node"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "-" + hex.EncodeToString(b)
}

// checkNodeID checks a --node-id: its characters keep it readable in logs
// and free of the separators Redis values and lease tokens use.
func checkNodeID(id string) error {
	if id == "" || len(id) > 128 || strings.IndexFunc(id, func(r rune) bool { return !nodeIDChar(r) }) >= 0 {
		return fmt.Errorf("--node-id: %q must be 1-128 characters of A-Z a-z 0-9 . _ -", id)
	}
	return nil
}

func nodeIDChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}

// ParseWSNode reads wsnode settings from env and args and validates them.
func ParseWSNode(args []string, env Env, out io.Writer) (WSNode, error) {
	c := DefaultWSNode()
	s := newSet("wsnode", env, out)
	s.common(&c.Common)
	s.str(&c.Addr, "addr", "WebSocket listen address (ws://host/app/{key})")
	s.str(&c.NodeID, "node-id", "this node's name in Redis (default: unique per start)")
	s.dur(&c.Heartbeat, "heartbeat", "how often to refresh this node's last-seen time")
	s.dur(&c.Drain, "drain", "window over which SIGTERM closes sockets with code 4200")
	s.dur(&c.UserAuthTimeout, "user-auth-timeout", "for apps with enableUserAuthentication: how long a socket may stay without pusher:signin (or a private or presence subscription) before it is closed with 4009")
	s.integer(&c.MaxSockets, "max-sockets", "connections the WebSocket port holds at once, handshaking or upgraded; past it new ones get 503 "+
		"(0: derived from the open-file limit, leaving room for Redis and the admin port)")
	s.str(&c.Transport, "transport", "how sockets are served: eventloop (a loop per core watches every socket; Linux only) or goroutine (a goroutine per socket, the fallback)")
	s.integer(&c.Writers, "writers", "goroutines that send queued frames to sockets (0: half the CPUs, at least one)")
	s.str(&c.AdvertiseHost, "advertise-host", "host (no port) at which cleaners reach the admin port to watch this node (GET /liveness), e.g. the pod IP "+
		"(empty: the --admin-addr host if it is an IP, else none: the node is then reaped only through its Redis liveness subscription and heartbeat)")
	s.boolean(&c.ExitAnchor, "exit-anchor", "keep two child processes, wsnode-anchor sharing this node's descriptors and wsnode-memory its memory, so a killed node's Redis and admin connections end at once: "+
		"the cleaners then learn of a SIGKILL within about a millisecond however much memory and how many sockets the node holds (Linux on amd64; elsewhere, or false, the close waits for the kernel to free the memory and walk the descriptors)")
	words, err := s.parse(args, false)
	if stop(err) {
		return c, err
	}
	errs := []error{err, s.noWords(words)}
	errs = append(errs, validateCommon(&c.Common, env)...)
	errs = append(errs, checkAddr("--addr", c.Addr, false))
	errs = append(errs, checkNodeID(c.NodeID))
	errs = append(errs, positive("--heartbeat", c.Heartbeat), positive("--drain", c.Drain), positive("--user-auth-timeout", c.UserAuthTimeout))
	errs = append(errs, checkTransport(c.Transport), checkHost("--advertise-host", c.AdvertiseHost))
	if c.Writers < 0 {
		errs = append(errs, fmt.Errorf("--writers: %d is negative (0 derives it from the CPUs)", c.Writers))
	}
	return c, errors.Join(errs...)
}

// checkTransport checks a --transport: the event loop exists on Linux only.
func checkTransport(t string) error {
	switch {
	case t == TransportEventLoop && runtime.GOOS != "linux":
		return fmt.Errorf("--transport: %q needs Linux (epoll); use %q", t, TransportGoroutine)
	case t != TransportEventLoop && t != TransportGoroutine:
		return fmt.Errorf("--transport: %q is not %q or %q", t, TransportEventLoop, TransportGoroutine)
	}
	return nil
}

// CleanerCommands is what `cleaner --help` lists besides running as a
// cleaner: each subcommand with its arguments and what it does.
const CleanerCommands = `  audit [--repair]
        check every app's counts once and exit: 0 when consistent, 1 when
        drift was found (repaired or not) or the audit failed; --repair sets
        each differing global entry to the sum of the nodes' contributions`

// ParseCleaner reads cleaner settings from env and args and validates them.
// The first word that is not a flag (a subcommand) and everything after it
// that is not one of these flags are returned in order, for the subcommand
// to parse: `cleaner audit --redis URL --repair` and `cleaner --redis URL
// audit --repair` both return [audit --repair].
func ParseCleaner(args []string, env Env, out io.Writer) (Cleaner, []string, error) {
	c := DefaultCleaner()
	s := newSet("cleaner", env, out)
	s.commands = CleanerCommands
	s.common(&c.Common)
	s.str(&c.NodeID, "node-id", "this cleaner's name where the lease holder is shown (default: unique per start)")
	s.dur(&c.DeadAfter, "dead-after", "age of last-seen after which a node is reaped")
	s.dur(&c.ScanInterval, "scan-interval", "how often the active cleaner looks for dead nodes")
	s.dur(&c.LeaseTTL, "lease-ttl", "lifetime of the active cleaner's lease (0: no lease, this cleaner is always active alongside any other; for tests only)")
	s.dur(&c.LivenessInterval, "liveness-interval", "how often the active cleaner looks for nodes whose Redis connection closed (their process died), to reap them before --dead-after (0: off)")
	s.dur(&c.LivenessGrace, "liveness-grace", "how old a node's last-seen must be, with its connection closed, to be reaped before --dead-after")
	rest, err := s.parse(args, true)
	if stop(err) {
		return c, nil, err
	}
	errs := []error{err}
	errs = append(errs, validateCommon(&c.Common, env)...)
	errs = append(errs, checkNodeID(c.NodeID), positive("--dead-after", c.DeadAfter), positive("--scan-interval", c.ScanInterval))
	if c.LivenessInterval < 0 {
		errs = append(errs, fmt.Errorf("--liveness-interval: %v must not be negative (0 turns the liveness check off)", c.LivenessInterval))
	}
	if c.LivenessGrace < 0 || c.LivenessGrace > c.DeadAfter {
		errs = append(errs, fmt.Errorf("--liveness-grace: %v must be between 0 and --dead-after (%v)", c.LivenessGrace, c.DeadAfter))
	}
	switch {
	case c.LeaseTTL < 0:
		errs = append(errs, fmt.Errorf("--lease-ttl: %v must not be negative (0 turns the lease off, for tests only)", c.LeaseTTL))
	case c.LeaseTTL > 0 && c.LeaseTTL < 30*time.Millisecond:
		errs = append(errs, fmt.Errorf("--lease-ttl: %v is too short (at least 30ms: it is renewed every third of it; 0 turns the lease off, for tests only)", c.LeaseTTL))
	}
	return c, rest, errors.Join(errs...)
}

// ParseHTTPAPI reads httpapi settings from env and args and validates them.
func ParseHTTPAPI(args []string, env Env, out io.Writer) (HTTPAPI, error) {
	c := DefaultHTTPAPI()
	s := newSet("httpapi", env, out)
	s.common(&c.Common)
	s.str(&c.Addr, "addr", "HTTP API listen address")
	s.dur(&c.StaleAfter, "stale-after", "last-seen age from which a node counts as stale in X-Headcount-Stale-Nodes (match the cleaner's --dead-after)")
	s.dur(&c.ListingCacheTTL, "listing-cache-ttl", "how long a full channel listing computed once across replicas is reused (a listing is at most this old; negative: off)")
	s.dur(&c.ListingLockTTL, "listing-lock-ttl", "how long replicas wait for one that died computing a listing (below --listing-cache-ttl)")
	s.boolean(&c.Dashboard, "dashboard", "serve the live dashboard at /dashboard and the demo room at /demo (unsigned: they show app data to anyone who reaches --addr)")
	s.str(&c.DemoWS, "demo-ws", "wsnode host:port the demo room's browser connects to (empty host: the page's host)")
	s.str(&c.DashboardHosts, "dashboard-hosts", "comma-separated host names the dashboard and demo answer to besides loopback names, IP addresses and --addr's host (DNS rebinding guard)")
	s.dur(&c.IdleTimeout, "idle-timeout", "how long a keep-alive connection may wait for its next request")
	s.dur(&c.ReadTimeout, "read-timeout", "how long reading a whole request, headers and body, may take")
	s.dur(&c.WriteTimeout, "write-timeout", "how long a request may take from the end of its headers to the end of its answer (above --read-timeout)")
	s.integer(&c.MaxConnections, "max-connections", "connections the API port holds at once; past it a new one takes the place of the one idle longest, or gets 503 if all are busy "+
		"(0: derived from the open-file limit, leaving room for Redis and the admin port)")
	words, err := s.parse(args, false)
	if stop(err) {
		return c, err
	}
	errs := []error{err, s.noWords(words)}
	errs = append(errs, validateCommon(&c.Common, env)...)
	errs = append(errs, checkAddr("--addr", c.Addr, false), checkAddr("--demo-ws", c.DemoWS, false))
	errs = append(errs, positive("--stale-after", c.StaleAfter), positive("--listing-lock-ttl", c.ListingLockTTL))
	if c.ListingCacheTTL >= 0 && c.ListingLockTTL >= c.ListingCacheTTL {
		errs = append(errs, fmt.Errorf("--listing-lock-ttl: %v must be below --listing-cache-ttl %v (the lock expires before the cache)", c.ListingLockTTL, c.ListingCacheTTL))
	}
	for _, h := range c.DashboardHostList() {
		if !hostName.MatchString(h) {
			errs = append(errs, fmt.Errorf("--dashboard-hosts: %q is not a host name (give names only, without scheme, port or path)", h))
		}
	}
	errs = append(errs, positive("--idle-timeout", c.IdleTimeout), positive("--read-timeout", c.ReadTimeout), positive("--write-timeout", c.WriteTimeout))
	if c.ReadTimeout > 0 && c.WriteTimeout > 0 && c.WriteTimeout <= c.ReadTimeout {
		errs = append(errs, fmt.Errorf("--write-timeout: %v must be above --read-timeout %v (it starts when a request's headers are in, so it covers reading the body too)", c.WriteTimeout, c.ReadTimeout))
	}
	if c.MaxConnections < 0 {
		errs = append(errs, fmt.Errorf("--max-connections: %d is negative (0 derives it from the open-file limit)", c.MaxConnections))
	}
	return c, errors.Join(errs...)
}

func validateCommon(c *Common, env Env) []error {
	var errs []error
	errs = append(errs, validateRedis(c)...)
	if c.AdminAddr != "" {
		errs = append(errs, checkAddr("--admin-addr", c.AdminAddr, false))
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format: %q is not text or json", c.LogFormat))
	}
	if err := keyspace.Check(c.RedisPrefix); err != nil {
		errs = append(errs, fmt.Errorf("--redis-prefix: %w", err))
	}
	if c.HistoryBudgetMB < 1 || c.HistoryBudgetMB > MaxHistoryBudgetMB {
		errs = append(errs, fmt.Errorf("--history-budget-mb: must be 1 to %d, not %d", MaxHistoryBudgetMB, c.HistoryBudgetMB))
	}
	if c.SliceSize < 0 {
		errs = append(errs, fmt.Errorf("--slice-size: %d is negative (0 means the default)", c.SliceSize))
	}
	var err error
	if c.AppsRefresh <= 0 {
		errs = append(errs, fmt.Errorf("--apps-refresh: %s must be positive", c.AppsRefresh))
	}
	from := "" // the setting that says where the apps are, when not the environment
	dbCfg, fromSoketi, err := appsdb.FromSoketiEnv(env)
	if err != nil {
		errs = append(errs, err)
	}
	switch {
	case c.AppsFile != "" && c.AppsDB != "":
		errs = append(errs, errors.New("--apps-file and --apps-db: the apps come from one place; give one"))
	case fromSoketi && (c.AppsFile != "" || c.AppsDB != ""):
		errs = append(errs, fmt.Errorf("%s is set beside --apps-file or --apps-db: the apps come from one place; unset it or them", appsdb.SoketiDriverVariable))
	case c.AppsFile != "":
		from = "--apps-file"
		src := apps.NewFile(c.AppsFile)
		c.AppsSource = src
		if c.Apps, err = src.Load(context.Background()); err != nil {
			errs = append(errs, fmt.Errorf("--apps-file: %s: %w", c.AppsFile, err))
		}
	case c.AppsDB != "" || fromSoketi:
		from = "--apps-db"
		if c.AppsDB != "" {
			dbCfg = appsdb.Config{URL: c.AppsDB, Table: c.AppsDBTable}
		} else {
			from = appsdb.SoketiDriverVariable
			c.AppsIgnored = appsdb.SoketiEnvIgnored(env)
		}
		// Loaded by the binary's reloader, not here: nothing dials before
		// the configuration is valid, and a database down at start is a
		// binary not ready yet, not one that exits.
		c.Apps = &apps.Registry{}
		if src, err := appsdb.New(dbCfg); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", from, err))
		} else {
			c.AppsSource = src
		}
	default:
		if c.Apps, err = apps.FromEnv(env); err != nil {
			errs = append(errs, fmt.Errorf("the app from the environment (HEADCOUNT_APP_* or %s*): %w", apps.SoketiEnvPrefix, err))
		}
	}
	// Ignoring them would serve credentials other than those the operator
	// set; soketi would apply its own to the first app.
	if from != "" {
		if set := apps.EnvSet(env); len(set) > 0 {
			errs = append(errs, fmt.Errorf("%s: set beside %s, which holds every app; move the values there or unset them", strings.Join(set, ", "), from))
		}
	}
	return errs
}

var portPattern = regexp.MustCompile(`^[0-9]{1,5}$`)

// hostName is a DNS name: dot-separated labels of letters, digits and
// hyphens.
var hostName = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$`)

func checkAddr(setting, addr string, needHost bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %q is not host:port: %w", setting, addr, err)
	}
	if n, _ := strconv.Atoi(port); !portPattern.MatchString(port) || n > 65535 {
		return fmt.Errorf("%s: %q has an invalid port", setting, addr)
	}
	if needHost && host == "" {
		return fmt.Errorf("%s: %q has no host", setting, addr)
	}
	return nil
}

// checkHost checks a host given without a port: a name or an IP, IPv6
// unbracketed (the port is joined to it with net.JoinHostPort).
func checkHost(setting, host string) error {
	if host == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(host); err == nil {
		return fmt.Errorf("%s: %q is host:port; give the host only (the admin port is added)", setting, host)
	}
	if strings.ContainsAny(host, "[]/@?# \t") || strings.Contains(host, "://") {
		return fmt.Errorf("%s: %q is not a host name or IP address (IPv6 without brackets)", setting, host)
	}
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return fmt.Errorf("%s: %q is not a host name or IP address", setting, host)
	}
	return nil
}

func positive(setting string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s: %v must be positive", setting, d)
	}
	return nil
}

// MaxSocketsFor is the default --max-sockets under an open-file limit: the
// limit less headroom of max(64, limit/10) for the node's other files (its
// Redis connections, pooled and pub/sub, the admin port's scrapes and
// probes, its listeners and logs), and never below half the limit. A limit
// of 1024 gives 922; 1,048,576 gives 943,719.
func MaxSocketsFor(limit uint64) int {
	l := int64(min(limit, 1<<40)) // RLIM_INFINITY is all ones
	return int(max(l-max(64, l/10), l/2))
}

// MaxConnectionsFor is httpapi's default --max-connections under an
// open-file limit, for a process whose Redis clients may hold up to redis
// connections: MaxSocketsFor(limit), whose headroom covers the admin port,
// the listeners, logs and outgoing webhooks, less the Redis connections,
// and never below a quarter of the limit. A limit of 1024 and 30 Redis
// connections (go-redis's pools on 2 CPUs) give 892.
func MaxConnectionsFor(limit uint64, redis int) int {
	l := int64(min(limit, 1<<40)) // RLIM_INFINITY is all ones
	return int(max(int64(MaxSocketsFor(limit))-int64(max(redis, 0)), l/4))
}
