package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotHeld means the lease is held by someone else or by nobody.
var ErrNotHeld = errors.New("lease not held")

var (
	renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// Lease is one contender's handle on a lease key.
type Lease struct {
	rdb   redis.UniversalClient
	key   string
	ttl   time.Duration
	token string
	// validUntil is when the lease may have expired in Redis, measured from
	// before the last successful acquire or renew was sent, as monotonic
	// time since base. Atomic: the active side reads it while the elector
	// renews.
	base       time.Time
	validUntil atomic.Int64
}

// New returns a handle with a fresh random token.
func New(rdb redis.UniversalClient, key string, ttl time.Duration) *Lease {
	return NewNamed(rdb, key, ttl, "")
}

// NewNamed is New with the contender's name in front of its token
// ("name/random"), so those who Read the lease see who holds it. The name
// must not contain '/'; the random part alone fences the lease.
func NewNamed(rdb redis.UniversalClient, key string, ttl time.Duration, name string) *Lease {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	if name != "" {
		token = name + nameSep + token
	}
	return &Lease{rdb: rdb, key: key, ttl: ttl, token: token, base: time.Now()}
}

// Token identifies this contender (logs, tests).
func (l *Lease) Token() string { return l.token }

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// TryAcquire takes the lease if nobody holds it.
func (l *Lease) TryAcquire(ctx context.Context) (bool, error) {
	start := time.Now()
	ok, err := l.rdb.SetNX(ctx, l.key, l.token, l.ttl).Result()
	if err != nil {
		return false, fmt.Errorf("acquire lease %s: %w", l.key, err)
	}
	if ok {
		l.setValidUntil(start.Add(l.ttl))
	}
	return ok, nil
}

// Renew extends the lease by its TTL if this handle still holds it;
// ErrNotHeld otherwise.
func (l *Lease) Renew(ctx context.Context) error {
	start := time.Now()
	n, err := renewScript.Run(ctx, l.rdb, []string{l.key}, l.token, l.ttl.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	if n != 1 {
		l.validUntil.Store(0)
		return ErrNotHeld
	}
	l.setValidUntil(start.Add(l.ttl))
	return nil
}

// Release gives the lease up if this handle holds it.
func (l *Lease) Release(ctx context.Context) error {
	l.validUntil.Store(0)
	if err := releaseScript.Run(ctx, l.rdb, []string{l.key}, l.token).Err(); err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}

// Valid reports whether the lease is surely still ours: the TTL, less a
// tenth for clock drift between us and Redis, has not run out since the last
// successful acquire or renew. It uses the monotonic clock, so a process that
// was paused past its TTL sees false as soon as it resumes.
func (l *Lease) Valid() bool {
	return l.remaining() > l.ttl/10
}

// remaining is how long the lease surely lives on in Redis.
func (l *Lease) remaining() time.Duration {
	return time.Duration(l.validUntil.Load()) - time.Since(l.base)
}

func (l *Lease) setValidUntil(t time.Time) { l.validUntil.Store(int64(t.Sub(l.base))) }
