package load

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// holdHeadroom is how much this process's memory may grow during a hold
// before its collector runs anyway: at BenchmarkPeer's 50,000 deliveries a
// second the readers allocate about 15 MB a second, so a minute's hold fits.
const holdHeadroom = 1 << 30

// late counts the holds under way in this process: the collector's
// settings are the process's, and runs may overlap (parallel tests).
var late struct {
	sync.Mutex
	holds   int
	percent int
	limit   int64
}

// collectLate keeps this process's garbage collector from running during a
// hold, until its memory has grown by holdHeadroom, and returns what puts
// the collector's settings back. One process plays every client here, so
// a collection cycle marks all the readers' stacks and slows them all at
// once: a burst it overlaps is read late by every subscriber, which no
// population of real clients does. Measured (docs/TRANSPORT.md, "The
// reader's collector"), each of a round's slowest events overlapped one
// of this process's cycles, and set the round's p99, for either server.
func collectLate() (restore func()) {
	late.Lock()
	defer late.Unlock()
	if late.holds == 0 {
		late.percent = debug.SetGCPercent(-1)
		late.limit = debug.SetMemoryLimit(-1)
		mapped := int64(readMetric("/memory/classes/total:bytes")) //nolint:gosec // G115: bytes mapped, far under 2^63
		debug.SetMemoryLimit(min(late.limit, mapped+holdHeadroom))
	}
	late.holds++
	var once sync.Once
	return func() {
		once.Do(func() {
			late.Lock()
			defer late.Unlock()
			if late.holds--; late.holds == 0 {
				debug.SetMemoryLimit(late.limit)
				debug.SetGCPercent(late.percent)
			}
		})
	}
}

// collections is how many collection cycles this process has completed.
func collections() uint64 { return readMetric("/gc/cycles/total:gc-cycles") }

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
