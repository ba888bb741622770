package counts

import (
	"testing"

	"github.com/headcount/headcount/pkg/luascript"
)

// TestStatusesAreDistinct: a script's first value names one outcome, so
// no two statuses share a value (three once shared -1), and the scripts
// read each under its name with Go's value (the preludes scripts.go
// makes).
func TestStatusesAreDistinct(t *testing.T) {
	t.Parallel()
	statuses := map[string]any{
		"STATUS_APPLIED": statusApplied, "STATUS_UNREGISTERED": statusUnregistered, "STATUS_NEGATIVE": statusNegative,
		"STATUS_UNDECLARED": statusUndeclared, "STATUS_REAPS": statusReaps, "STATUS_SPARED": statusSpared, "STATUS_EXPIRED": statusExpired,
	}
	for _, p := range luascript.Statuses(statuses, statusPrelude, ExactPrelude) {
		t.Error(p)
	}
	flight := map[string]any{"FLIGHT_WAIT": flightWait, "FLIGHT_CACHED": flightCached, "FLIGHT_COMPUTE": flightCompute}
	for _, p := range luascript.Statuses(flight, flightPrelude) {
		t.Error(p)
	}
}
