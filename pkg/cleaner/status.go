package cleaner

// status.go: who holds the cleaners' lease, for an operator's dashboard
// (GET /apps/{app_id}/status). Read-only.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/headcount/headcount/pkg/redisx"
	"github.com/redis/go-redis/v9"
)

// holderIDLength is how much of the holder's token LeaseState shows: enough
// to tell a failover (a new token) from a renewal, too little to be useful
// to anyone who could forge a release.
const holderIDLength = 8

// LeaseState is the cleaners' lease as Redis holds it.
type LeaseState struct {
	// Held is false when no cleaner is active (none runs, or the last
	// holder's lease ran out and no standby has taken it yet).
	Held bool
	// Holder is the start of the holder's random token: it changes on a
	// failover and stays the same across renewals.
	Holder string
	// ExpiresIn is how long the lease lives unless renewed (every third of
	// the lease TTL while the holder is alive).
	ExpiresIn time.Duration
}

// ReadLease reads the token and time to live of the lease of ks's cleaners
// (LeaseKey) in one atomic unit.
func ReadLease(ctx context.Context, rdb redis.UniversalClient, ks redisx.Keyspace) (LeaseState, error) {
	var token *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		token = p.Get(ctx, LeaseKey(ks))
		ttl = p.PTTL(ctx, LeaseKey(ks))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) { // no lease is no error
		return LeaseState{}, fmt.Errorf("read cleaner lease: %w", err)
	}
	tok := token.Val()
	if tok == "" {
		return LeaseState{}, nil
	}
	return LeaseState{Held: true, Holder: tok[:min(len(tok), holderIDLength)], ExpiresIn: max(ttl.Val(), 0)}, nil
}
