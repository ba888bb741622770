//go:build lockorder

package lockorder_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/headcount/headcount/pkg/lockorder"
)

type outer struct{}

func (outer) Rank() lockorder.Rank { return lockorder.Rank{N: 1, Name: "outer"} }

type inner struct{}

func (inner) Rank() lockorder.Rank { return lockorder.Rank{N: 2, Name: "inner"} }

// panics runs f and returns what it panicked with, or "".
func panics(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = r.(string)
		}
	}()
	f()
	return ""
}

// nest takes locks in the order given, then releases them.
func nest(locks ...sync.Locker) {
	for _, l := range locks {
		l.Lock()
	}
	for i := len(locks) - 1; i >= 0; i-- {
		locks[i].Unlock()
	}
}

func TestInOrderPasses(t *testing.T) {
	var o lockorder.RWMutex[outer]
	var i lockorder.Mutex[inner]
	var l lockorder.Mutex[lockorder.Leaf]
	if msg := panics(func() {
		o.RLock()
		nest(&i, &l)
		o.RUnlock()
		nest(&l) // alone again: nothing held
	}); msg != "" {
		t.Fatal(msg)
	}
}

// TestInversionPanics is the checker's point: the wrong order is reported
// on a run that does not deadlock, before the second lock is waited for.
func TestInversionPanics(t *testing.T) {
	var o lockorder.Mutex[outer]
	var i lockorder.Mutex[inner]
	i.Lock()
	msg := panics(o.Lock)
	i.Unlock()
	if !strings.Contains(msg, "outer (rank 1) taken while holding inner (rank 2)") {
		t.Fatalf("inversion not reported: %q", msg)
	}
	// The refused lock was not taken: the record and o are as before.
	if msg := panics(func() { nest(&o, &i) }); msg != "" {
		t.Fatal(msg)
	}
}

func TestTwoLeavesPanic(t *testing.T) {
	var a, b lockorder.Mutex[lockorder.Leaf]
	a.Lock()
	msg := panics(b.Lock)
	a.Unlock()
	if !strings.Contains(msg, "a leaf (rank 255) taken while holding a leaf") {
		t.Fatalf("nesting under a leaf not reported: %q", msg)
	}
}

// TestSameRankReadPanics: two read locks of one rank (two shards of a
// sharded map) can deadlock behind writers, so they are refused too.
func TestSameRankReadPanics(t *testing.T) {
	var a, b lockorder.RWMutex[outer]
	a.RLock()
	msg := panics(b.RLock)
	a.RUnlock()
	if msg == "" {
		t.Fatal("two read locks of one rank not reported")
	}
}

func TestUnlockElsewherePanics(t *testing.T) {
	var m lockorder.Mutex[inner]
	m.Lock()
	got := make(chan string)
	go func() { got <- panics(m.Unlock) }()
	if msg := <-got; !strings.Contains(msg, "released by a goroutine that does not hold it") {
		t.Fatalf("unlock on another goroutine not reported: %q", msg)
	}
}
