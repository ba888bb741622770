package lockorder_test

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/headcount/headcount/pkg/lockorder"
)

// TestSizes holds the promise that a rank costs no byte, in either build:
// the structs that embed these keep their size classes (wsnode's
// TestSizes).
func TestSizes(t *testing.T) {
	if got, want := unsafe.Sizeof(lockorder.Mutex[lockorder.Leaf]{}), unsafe.Sizeof(sync.Mutex{}); got != want {
		t.Errorf("Mutex is %d bytes, sync.Mutex %d", got, want)
	}
	if got, want := unsafe.Sizeof(lockorder.RWMutex[lockorder.Leaf]{}), unsafe.Sizeof(sync.RWMutex{}); got != want {
		t.Errorf("RWMutex is %d bytes, sync.RWMutex %d", got, want)
	}
	var _ sync.Locker = &lockorder.Mutex[lockorder.Leaf]{} // sync.Cond takes one
}
