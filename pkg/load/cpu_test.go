package load

import (
	"os"
	"runtime"
	"testing"
	"time"
)

func TestPIDCPUReadsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before, err := pidCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for end := start.Add(200 * time.Millisecond); time.Now().Before(end); { //nolint:revive // an empty spin: the CPU it burns is what the test measures
	}
	after, err := pidCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// 200 ms of spinning on a shared machine, counted in 10 ms ticks: some
	// CPU time, and no more than the wall time (plus the other threads').
	if d := after - before; d <= 0 || d > 2*time.Since(start).Seconds()+0.1 {
		t.Fatalf("CPU went from %.2fs to %.2fs over %v of spinning", before, after, time.Since(start))
	}
	if _, err := pidCPU(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
