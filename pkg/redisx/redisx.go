package redisx

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/config"
)

// NewClient returns a client for c's Redis; it does not dial until first use.
func NewClient(c config.Common) (redis.UniversalClient, error) {
	if seeds := c.ClusterSeeds(); len(seeds) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:        seeds,
			DialTimeout:  2 * time.Second,
			ReadTimeout:  2 * time.Second,
			WriteTimeout: 2 * time.Second,
		}), nil
	}
	opt, err := redis.ParseURL(c.Redis)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	return redis.NewClient(opt), nil
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
