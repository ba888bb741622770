package counts

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStatusesAreDistinct: a script's first value names one outcome, so
// no two statuses share a value (three once shared -1).
func TestStatusesAreDistinct(t *testing.T) {
	statuses := []int{statusApplied, statusUnregistered, statusNegative, statusUndeclared, statusReaps, statusSpared, statusExpired}
	sorted := slices.Sorted(slices.Values(statuses))
	require.Equal(t, len(sorted), len(slices.Compact(sorted)), "statuses %v", statuses)
}
