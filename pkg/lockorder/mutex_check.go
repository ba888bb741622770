//go:build lockorder

package lockorder

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"sync"
)

// Mutex is a sync.Mutex ranked R whose Lock checks the order.
type Mutex[R Ranked] struct{ mu sync.Mutex }

// RWMutex is a sync.RWMutex ranked R whose Lock and RLock check the order.
type RWMutex[R Ranked] struct{ mu sync.RWMutex }

// Enabled reports whether the checks are built in (the lockorder tag).
const Enabled = true

// Lock checks R against the ranks held, then locks.
func (m *Mutex[R]) Lock() {
	var r R
	acquire(r.Rank())
	m.mu.Lock()
}

// TryLock checks as Lock does, then tries the lock.
func (m *Mutex[R]) TryLock() bool {
	var r R
	acquire(r.Rank())
	if m.mu.TryLock() {
		return true
	}
	release(r.Rank())
	return false
}

// Unlock unlocks and forgets the hold.
func (m *Mutex[R]) Unlock() {
	var r R
	m.mu.Unlock()
	release(r.Rank())
}

// Lock checks R against the ranks held, then locks.
func (m *RWMutex[R]) Lock() {
	var r R
	acquire(r.Rank())
	m.mu.Lock()
}

// Unlock unlocks and forgets the hold.
func (m *RWMutex[R]) Unlock() {
	var r R
	m.mu.Unlock()
	release(r.Rank())
}

// RLock checks as Lock does: a read lock taken twice, or out of order,
// can deadlock behind a waiting writer.
func (m *RWMutex[R]) RLock() {
	var r R
	acquire(r.Rank())
	m.mu.RLock()
}

// RUnlock unlocks and forgets the hold.
func (m *RWMutex[R]) RUnlock() {
	var r R
	m.mu.RUnlock()
	release(r.Rank())
}

// held is each goroutine's ranks, in the order taken. Its own mutex is
// a plain one: the checker is not in the order it checks.
var held = struct {
	sync.Mutex
	by map[uint64][]Rank
}{by: map[uint64][]Rank{}}

// acquire records r for the calling goroutine, or panics if the goroutine
// holds a rank not below r.
func acquire(r Rank) {
	g := goid()
	held.Lock()
	hs := held.by[g]
	for _, h := range hs {
		if h.N >= r.N {
			held.Unlock()
			panic(fmt.Sprintf("lockorder: %s (rank %d) taken while holding %s (rank %d); held, in order: %v",
				r.Name, r.N, h.Name, h.N, hs))
		}
	}
	held.by[g] = append(hs, r)
	held.Unlock()
}

// release forgets the calling goroutine's latest hold of r.
func release(r Rank) {
	g := goid()
	held.Lock()
	defer held.Unlock()
	hs := held.by[g]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i] == r {
			hs = append(hs[:i], hs[i+1:]...)
			if len(hs) == 0 {
				delete(held.by, g)
			} else {
				held.by[g] = hs
			}
			return
		}
	}
	panic(fmt.Sprintf("lockorder: %s (rank %d) released by a goroutine that does not hold it", r.Name, r.N))
}

// goid is the calling goroutine's id, read from its stack's header
// ("goroutine 42 [running]:"): slow, and only in the tagged build.
func goid() uint64 {
	var buf [32]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("lockorder: cannot read the goroutine's id from " + strconv.Quote(string(buf[:])))
	}
	return id
}
