package load

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// gcPercent reads the collector's GOGC setting without changing it.
func gcPercent() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

func TestCollectLateHoldsOffTheCollectorUntilTheLastHoldEnds(t *testing.T) {
	percent, limit := gcPercent(), debug.SetMemoryLimit(-1)
	first, second := collectLate(), collectLate()

	before := collections()
	var keep [][]byte
	for i := range 64 << 10 { // 64 MiB, a fifth of it kept: several cycles at any GOGC
		b := make([]byte, 1<<10)
		if i%5 == 0 {
			keep = append(keep, b)
		}
	}
	if n := collections() - before; n != 0 {
		t.Errorf("%d collections during a hold", n)
	}
	runtime.KeepAlive(keep)

	first()
	first() // twice: the second call must not end the other hold
	if got := gcPercent(); got != -1 {
		t.Errorf("GOGC %d while a hold is under way, want off", got)
	}
	second()
	if got := gcPercent(); got != percent {
		t.Errorf("GOGC %d after the last hold, want %d back", got, percent)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit %d after the last hold, want %d back", got, limit)
	}
}
