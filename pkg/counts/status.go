package counts

// status.go: the registered nodes of an app as an operator's dashboard shows
// them (GET /apps/{app_id}/status). Read-only.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeStatus is one registered wsnode of an app.
type NodeStatus struct {
	ID string
	// LastSeen is the node's last heartbeat or write, by Redis's clock.
	LastSeen time.Time
	// Age is how long before the read, by the same clock, LastSeen was:
	// a node older than the cleaner's dead-after is awaiting its reap.
	Age time.Duration
	// Connections is the node's open sockets of the app.
	Connections int64
}

// NodeStatuses returns app's registered nodes, oldest heartbeat first (the
// nodes set's order), and
// Redis's time of the read. Two round trips: the node list with the time,
// then each node's connections; a node reaped in between shows 0.
func (s *Store) NodeStatuses(ctx context.Context, app string) ([]NodeStatus, time.Time, error) {
	var nodes *redis.ZSliceCmd
	var now *redis.TimeCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		nodes = p.ZRangeWithScores(ctx, s.nodesKey(app), 0, -1)
		now = p.Time(ctx)
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read nodes of app %s: %w", app, err)
	}
	out := make([]NodeStatus, 0, len(nodes.Val()))
	for _, z := range nodes.Val() {
		id, _ := z.Member.(string)
		seen := time.UnixMilli(int64(z.Score))
		out = append(out, NodeStatus{ID: id, LastSeen: seen, Age: max(now.Val().Sub(seen), 0)})
	}
	if len(out) == 0 {
		return out, now.Val(), nil
	}
	conns := make([]*redis.StringCmd, len(out))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range out {
			conns[i] = p.HGet(ctx, s.nodeKey(app, n.ID), connectionsField)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, time.Time{}, fmt.Errorf("read connections of app %s's nodes: %w", app, err)
	}
	for i, c := range conns {
		v, err := c.Result()
		if errors.Is(err, redis.Nil) {
			continue // no sockets, or reaped since the first read
		}
		if out[i].Connections, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, time.Time{}, fmt.Errorf("connections of node %s are %q: %w", out[i].ID, v, err)
		}
	}
	return out, now.Val(), nil
}
