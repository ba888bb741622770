//go:build !linux

package proctest

import "testing"

// SplitCPUs reports ok false where affinity is not supported: benchmarks
// then run unpinned.
func SplitCPUs() (servers, load []int, ok bool) { return nil, nil, false }

// Pin does nothing where affinity is not supported.
func Pin(testing.TB, int, []int) {}

// Favor does nothing where thread priorities are not supported.
func Favor(testing.TB, int) {}
