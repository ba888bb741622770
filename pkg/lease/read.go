package lease

// read.go: who holds a lease, for those who watch it without contending
// (an operator's dashboard). Read-only.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/keyspace"
)

// CleanerKey is the lease key the cleaners of ks contend for. It lives
// here, not in the cleaner, so that those who only read the lease (the HTTP
// API's status endpoint) need not import the cleaner app.
func CleanerKey(ks keyspace.Space) string { return ks.Name("cleaner:lease") }

// holderIDLength is how much of the holder's token Status shows: enough
// to tell a failover (a new token) from a renewal, too little to be useful
// to anyone who could forge a release.
const holderIDLength = 8

// nameSep ends the name NewNamed puts in front of a token.
const nameSep = "/"

// Status is a lease as Redis holds it.
type Status struct {
	// Held is false when nobody holds the lease (no contender runs, or the
	// last holder's lease ran out and no standby has taken it yet).
	Held bool
	// Holder is the holder's name, if it has one (NewNamed), then "/" and
	// the start of its random token: it changes on a failover, even to a
	// restarted holder of the same name, and stays the same across renewals.
	Holder string
	// ExpiresIn is how long the lease lives unless renewed (every third of
	// the lease TTL while the holder is alive).
	ExpiresIn time.Duration
}

// Read reads key's token and time to live in one atomic unit. A key
// nobody holds is a zero Status, not an error.
func Read(ctx context.Context, rdb redis.UniversalClient, key string) (Status, error) {
	var token *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		token = p.Get(ctx, key)
		ttl = p.PTTL(ctx, key)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) { // no lease is no error
		return Status{}, fmt.Errorf("read lease %s: %w", key, err)
	}
	tok := token.Val()
	if tok == "" {
		return Status{}, nil
	}
	name, random := "", tok
	if i := strings.LastIndex(tok, nameSep); i >= 0 {
		name, random = tok[:i+len(nameSep)], tok[i+len(nameSep):]
	}
	return Status{Held: true, Holder: name + random[:min(len(random), holderIDLength)], ExpiresIn: max(ttl.Val(), 0)}, nil
}
