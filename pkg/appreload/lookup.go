package appreload

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// lookup.go: a request naming an app this process does not serve reads
// the source at once rather than being refused until the next poll, so a
// row inserted a moment ago is served at its first client, as soketi's
// SQL app managers serve it.

const (
	// lookupEvery is the least time between the starts of two reads made
	// for lookups: a flood of unknown keys costs the source at most one
	// read per lookupEvery per process, whatever its size.
	lookupEvery = 500 * time.Millisecond
	// rememberFor is how long a name a read did not find is refused
	// without another read or wait.
	rememberFor = 3 * time.Second
	// rememberMax bounds the names remembered; the oldest go first.
	rememberMax = 4096
)

// lookups is the state of Lookup: the read the misses wait for and the
// names lately looked up in vain.
type lookups struct {
	mu sync.Mutex
	// next is the read the misses arriving now wait for: not started yet,
	// so it sees whatever was written before they arrived. nil when none
	// waits.
	next    *round
	running bool      // the goroutine of rounds runs
	last    time.Time // when the last lookup read started

	// The names looked up in vain, by hash (a name is a request's
	// input, of any length): a ring of rememberMax, and where each is.
	seed  maphash.Seed
	slot  map[uint64]int
	ring  [rememberMax]remembered
	write int
}

type remembered struct {
	hash  uint64
	until time.Time
}

// round is one read of the source for lookups.
type round struct {
	done    chan struct{}
	waiters int  // misses waiting for it, under lookups.mu
	ok      bool // the source was read; set before done closes
}

// Lookup is for a request naming an app this process does not serve as
// asked: a key or id unknown, or an app disabled or without the key the
// request signs with. serves reports whether the apps now serve the
// request; it is called on the caller's goroutine only, so it may set the
// caller's variables. Lookup returns serves() at once when it holds, when
// there is no source to read (the environment's app), or when name (what
// the request named) was looked up in vain within the last few seconds.
// Otherwise it waits for a read of the source that starts after the call,
// shared with every miss waiting at that moment, then returns serves().
// Reads for lookups run one at a time and at most one per lookupEvery, so
// a flood of unknown names costs the source a bounded rate of reads and
// a request whose app is served never waits. The wait ends with ctx and
// after at most loadTimeout; a read that fails changes nothing, as a
// poll's failure does, and is logged as one.
func (r *Reloader) Lookup(ctx context.Context, name string, serves func() bool) bool {
	if serves() {
		return true
	}
	if r.Source == nil {
		return false
	}
	r.init()
	l := &r.look
	now := time.Now()
	l.mu.Lock()
	if l.slot == nil {
		l.seed, l.slot = maphash.MakeSeed(), map[uint64]int{}
	}
	h := maphash.String(l.seed, name)
	if i, ok := l.slot[h]; ok && now.Before(l.ring[i].until) {
		l.mu.Unlock()
		r.m.lookups.WithLabelValues("remembered").Inc()
		return false
	}
	rd := l.next
	if rd == nil {
		rd = &round{done: make(chan struct{})}
		l.next = rd
	}
	rd.waiters++
	start := !l.running
	l.running = true
	l.mu.Unlock()
	if start {
		go r.rounds() //nolint:gosec // G118: the reads serve every waiting request, so no one request may cancel them; loadTimeout bounds each
	}

	t := time.NewTimer(loadTimeout)
	defer t.Stop()
	read := false
	select {
	case <-rd.done:
		read = rd.ok
	case <-ctx.Done():
	case <-t.C:
	}
	result := "found"
	switch ok := serves(); {
	case ok:
		r.m.lookups.WithLabelValues(result).Inc()
		return true
	case read:
		result = "unknown"
	default:
		result = "failed"
	}
	r.m.lookups.WithLabelValues(result).Inc()
	l.mu.Lock()
	l.remember(h, time.Now().Add(rememberFor))
	l.mu.Unlock()
	return false
}

// rounds runs the reads misses wait for, one at a time and at most one
// per lookupEvery, until none waits.
func (r *Reloader) rounds() {
	l := &r.look
	for {
		l.mu.Lock()
		if l.next == nil {
			l.running = false
			l.mu.Unlock()
			return
		}
		if wait := time.Until(l.last.Add(lookupEvery)); wait > 0 {
			// Misses arriving meanwhile join l.next, which has not started.
			l.mu.Unlock()
			time.Sleep(wait)
			continue
		}
		rd := l.next
		l.next, l.last = nil, time.Now()
		waiters := rd.waiters
		l.mu.Unlock()
		r.Log.Debug("reading the apps for requests naming an app not served", "requests", waiters)
		rd.ok = r.reload(context.Background())
		close(rd.done)
	}
}

// remember notes the name of hash h as looked up in vain until until,
// forgetting the oldest name if the ring is full. Called under l.mu.
func (l *lookups) remember(h uint64, until time.Time) {
	if i, ok := l.slot[h]; ok {
		l.ring[i].until = until
		return
	}
	old := l.ring[l.write]
	if i, ok := l.slot[old.hash]; ok && i == l.write {
		delete(l.slot, old.hash)
	}
	l.ring[l.write] = remembered{hash: h, until: until}
	l.slot[h] = l.write
	l.write = (l.write + 1) % rememberMax
}
