package keyspace

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts every Redis name unless --redis-prefix says
// otherwise.
const DefaultPrefix = "hc"

// Check reports why p cannot be a prefix: it must be non-empty, and hold no
// '{' or '}' (a hash tag in the prefix would put every app in one Cluster
// slot), no ':' (the separator after it, so one prefix never starts
// another's names) and no whitespace.
func Check(p string) error {
	if p == "" || strings.ContainsAny(p, "{}:") || strings.IndexFunc(p, unicode.IsSpace) >= 0 {
		return fmt.Errorf("%q must be non-empty, without '{', '}', ':' or whitespace", p)
	}
	return nil
}

// Space names the Redis keys and Pub/Sub channels of one deployment: each
// starts with the prefix and ':'. Since a valid prefix holds no ':'
// (Check), no name of one prefix starts another's. The zero Space has
// DefaultPrefix.
type Space struct{ prefix string }

// New returns the space of prefix, which the caller has validated with
// Check; "" means the default.
func New(prefix string) Space { return Space{prefix: prefix} }

// Prefix is the space's prefix, without the ':' after it.
func (k Space) Prefix() string {
	if k.prefix == "" {
		return DefaultPrefix
	}
	return k.prefix
}

// App starts every name of one app: "<prefix>:{<app>}:". The app id is the
// hash tag, so all of an app's names share one Cluster slot and a script
// may touch any of them.
func (k Space) App(app string) string { return k.Tagged(app) }

// Tagged starts the names that must share the slot of tag but belong to no
// app: "<prefix>:{<tag>}:".
func (k Space) Tagged(tag string) string { return k.Prefix() + ":{" + tag + "}:" }

// Name is a name of no app and no chosen slot: "<prefix>:<name>".
func (k Space) Name(name string) string { return k.Prefix() + ":" + name }

// GlobEscape escapes s for a SCAN MATCH pattern, so that it matches
// literally whatever glob characters it holds.
func GlobEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// scanner is the one command ScanPrefix needs from a client of one server.
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
}

// ScanPrefix calls fn with every key that starts with prefix, by SCAN: on
// the single server, or on a Cluster on the master holding prefix's slot
// when prefix holds a hash tag (every key it starts is in that slot), and
// on every master otherwise. It costs O(keys of those shards) in short
// commands, so it never blocks Redis; like SCAN it may report a key more
// than once, and a key written or deleted meanwhile may or may not be
// reported. fn is never called concurrently.
func ScanPrefix(ctx context.Context, rdb redis.UniversalClient, prefix string, fn func(key string)) error {
	match := GlobEscape(prefix) + "*"
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb, match, fn)
	}
	if hasHashTag(prefix) {
		// A key-less SCAN would go to a random master.
		m, err := c.MasterForKey(ctx, prefix)
		if err != nil {
			return fmt.Errorf("find the shard of %s: %w", prefix, err)
		}
		return scan(ctx, m, match, fn)
	}
	var mu sync.Mutex
	return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return scan(ctx, m, match, func(key string) {
			mu.Lock()
			defer mu.Unlock()
			fn(key)
		})
	})
}

func scan(ctx context.Context, sc scanner, match string, fn func(string)) error {
	var cursor uint64
	for {
		keys, next, err := sc.Scan(ctx, cursor, match, 1000).Result()
		if err != nil {
			return fmt.Errorf("scan %s: %w", match, err)
		}
		for _, k := range keys {
			fn(k)
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// hasHashTag reports whether Redis Cluster hashes key by a tag: a '{'
// followed, later, by a '}' with something between them.
func hasHashTag(key string) bool {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(key[i+1:], '}')
	return j > 0
}
