package counts

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/redis/go-redis/v9"
)

// Store reads the counts of every app and reaps dead nodes.
type Store struct {
	keys
	rdb redis.UniversalClient
	// LogEvents, if set before use, says which apps keep an event log
	// (eventlog.Key): reaping a node of such an app appends its edges to it.
	LogEvents func(app string) bool
}

// NewStore returns a store of the counts under ks on rdb.
func NewStore(rdb redis.UniversalClient, ks keyspace.Space) *Store {
	return &Store{keys: keys{ks}, rdb: rdb}
}

// Channel returns the global subscription count of one channel (0: vacant).
func (s *Store) Channel(ctx context.Context, app, channel string) (int64, error) {
	n, err := s.rdb.ZScore(ctx, s.globalKey(app), channel).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read channel count: %w", err)
	}
	return int64(n), nil
}

// Channels returns the occupied channels of app whose names start with
// prefix, with their global subscription counts.
func (s *Store) Channels(ctx context.Context, app, prefix string) (map[string]int64, error) {
	zs, err := s.rdb.ZRangeWithScores(ctx, s.globalKey(app), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list channels: %w", err)
	}
	out := make(map[string]int64, len(zs))
	for _, z := range zs {
		name, _ := z.Member.(string)
		if strings.HasPrefix(name, prefix) && z.Score > 0 {
			out[name] = int64(z.Score)
		}
	}
	return out, nil
}

// Contributions returns every registered node's channel counts in app, and
// each node's last-seen time. Tests and audits compare their sum with the
// global counts.
func (s *Store) Contributions(ctx context.Context, app string) (map[string]map[string]int64, map[string]time.Time, error) {
	nodes, err := s.rdb.ZRangeWithScores(ctx, s.nodesKey(app), 0, -1).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	contrib := make(map[string]map[string]int64, len(nodes))
	seen := make(map[string]time.Time, len(nodes))
	for _, z := range nodes {
		id, _ := z.Member.(string)
		seen[id] = time.UnixMilli(int64(z.Score))
		h, err := s.rdb.HGetAll(ctx, s.nodeKey(app, id)).Result()
		if err != nil {
			return nil, nil, fmt.Errorf("read contribution of %s: %w", id, err)
		}
		c := make(map[string]int64, len(h))
		for f, v := range h {
			kind, ch, _ := parseField(f)
			if kind != 'c' {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("contribution of %s to %q is %q: %w", id, ch, v, err)
			}
			c[ch] = n
		}
		contrib[id] = c
	}
	return contrib, seen, nil
}

// Apps returns every app that has had counts.
func (s *Store) Apps(ctx context.Context) ([]string, error) {
	apps, err := s.rdb.SMembers(ctx, s.appsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	return apps, nil
}

// StaleNodes returns up to limit nodes of app whose last-seen is at least
// deadAfter old by Redis's clock.
func (s *Store) StaleNodes(ctx context.Context, app string, deadAfter time.Duration, limit int) ([]string, error) {
	nodes, err := staleScript.Run(ctx, s.rdb, []string{s.nodesKey(app)}, deadAfter.Milliseconds(), limit).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("find stale nodes: %w", err)
	}
	return nodes, nil
}

// ReapNode removes node's contribution to app if its last-seen is still at
// least deadAfter old, in one atomic unit. It reports whether it reaped the
// node and what that changed cluster-wide. Reaping a node that is gone
// already does nothing, so concurrent cleaners never subtract twice.
func (s *Store) ReapNode(ctx context.Context, app, node string, deadAfter time.Duration) (bool, Reaped, error) {
	return s.reap(ctx, app, node, deadAfter.Milliseconds())
}

// RemoveNode removes node's contribution to app unconditionally: a node
// leaving gracefully.
func (s *Store) RemoveNode(ctx context.Context, app, node string) (bool, Reaped, error) {
	return s.reap(ctx, app, node, -1)
}

func (s *Store) reap(ctx context.Context, app, node string, deadAfterMs int64) (bool, Reaped, error) {
	logEvents := s.LogEvents != nil && s.LogEvents(app)
	// The node's presence channels are unknown until the script reads its
	// contribution: the first try declares none, and a script that finds
	// some writes nothing and names them (at most a few rounds: only a
	// node that came back alive meanwhile can add more).
	var fields []string
	var res scriptResult
	var err error
	for try := 0; ; try++ {
		res, err = parseResult(reapScript.Run(ctx, s.rdb, s.scriptKeys(app, node, logEvents, fields...), node, deadAfterMs, s.appPrefix(app), logArgs(logEvents)))
		if err != nil {
			return false, Reaped{}, fmt.Errorf("reap node %s of app %s: %w", node, app, err)
		}
		if res.status != statusUndeclared {
			break
		}
		if try == 5 {
			return false, Reaped{}, fmt.Errorf("reap node %s of app %s: its contribution kept changing", node, app)
		}
		fields = append(fields, res.undeclared...)
	}
	if res.status < 0 {
		return false, Reaped{}, nil
	}
	return true, Reaped{Edges: Edges{App: app, Channels: res.channels, Members: res.members},
		Fields: int(res.status), SinceSeen: time.Duration(res.ageMs) * time.Millisecond}, nil
}
