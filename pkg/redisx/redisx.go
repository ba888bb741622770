package redisx

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/config"
)

// Client timeouts in every mode: a dial, a read and a write each fail
// after this long, so an unreachable Redis is reported instead of waited on.
const timeout = 2 * time.Second

// clusterReload is how old a Cluster client's slot map may get before the
// next command reloads it. go-redis reloads at once only on MOVED or ASK;
// a primary that died answers neither, so until the periodic reload (60 s
// by default) every command of its slots went to the dead address, though
// its replica was promoted seconds earlier: a wsnode wrote no counts for a
// minute, and the cleaner reaped it meanwhile (TestClusterFailoverEndToEnd).
// A reload is one CLUSTER SLOTS, at most once a second per process.
const clusterReload = time.Second

// NewClient returns a client for c's Redis; it does not dial until first
// use. A single server and a Sentinel master are a *redis.Client (the
// failover client finds the master through the sentinels and follows a
// failover), so code that branches on *redis.ClusterClient treats both
// alike; a Cluster is a *redis.ClusterClient. Errors never show a password.
//
// Each new connection uses the TLS files and password file as they are
// then (re-read when changed, see files), so rotated credentials need no
// restart; their metrics go to c.RedisRegisterer.
func NewClient(c config.Common) (redis.UniversalClient, error) {
	switch c.RedisMode() {
	case config.RedisCluster:
		opt, err := c.ClusterOptions()
		if err != nil {
			return nil, fmt.Errorf("redis cluster: %w", err)
		}
		f, err := watch(c, opt.TLSConfig)
		if err != nil {
			return nil, fmt.Errorf("redis cluster: %w", err)
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = timeout, timeout, timeout
		opt.ClusterStateReloadInterval = clusterReload
		opt.Dialer, opt.CredentialsProviderContext = f.hooks(opt.Username)
		return redis.NewClusterClient(opt), nil
	case config.RedisSentinel:
		opt, err := c.FailoverOptions()
		if err != nil {
			return nil, fmt.Errorf("redis sentinel: %w", err)
		}
		f, err := watch(c, opt.TLSConfig)
		if err != nil {
			return nil, fmt.Errorf("redis sentinel: %w", err)
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = timeout, timeout, timeout
		opt.Dialer, opt.CredentialsProviderContext = f.hooks(opt.Username)
		if c.RedisSentinelPasswordFile != "" {
			opt.OnConnect = f.sentinelAuth(opt.SentinelUsername)
		}
		return redis.NewFailoverClient(opt), nil
	default:
		opt, err := c.SingleOptions()
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		f, err := watch(c, opt.TLSConfig)
		if err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = timeout, timeout, timeout
		opt.Dialer, opt.CredentialsProviderContext = f.hooks(opt.Username)
		return redis.NewClient(opt), nil
	}
}

// WrapConns makes every connection rdb dials from now on wrap's, on
// every shard of a Cluster too. Call it before rdb's first command.
func WrapConns(rdb redis.UniversalClient, wrap func(net.Conn) net.Conn) {
	h := connWrapper(wrap)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(c *redis.Client) { c.AddHook(h) })
		return
	}
	rdb.AddHook(h)
}

// connWrapper is a redis.Hook that wraps each dialled connection.
type connWrapper func(net.Conn) net.Conn

func (w connWrapper) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return w(c), nil
	}
}

func (connWrapper) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (connWrapper) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Ping checks that Redis answers (every shard, in Cluster mode).
func Ping(ctx context.Context, rdb redis.UniversalClient) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	}
	return rdb.Ping(ctx).Err()
}

// RoundTrips counts the network round trips a client makes: one per command
// sent alone and one per pipeline or transaction. Benchmarks use it to show
// what coalescing saves.
type RoundTrips struct{ n atomic.Int64 }

// Count returns the round trips so far.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

// DialHook implements redis.Hook.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}
