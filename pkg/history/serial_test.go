package history_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/history"
)

// TestAfter: serials compare as two integers, and a malformed one comes
// before any real one.
func TestAfter(t *testing.T) {
	t.Parallel()
	require.True(t, history.After("10-0", "9-99"))
	require.True(t, history.After("9-10", "9-9"), "numbers, not strings")
	require.False(t, history.After("9-9", "9-9"))
	require.False(t, history.After("9-9", "10-0"))
	require.True(t, history.After("1-0", ""), "a serial comes after none")
	require.False(t, history.After("", "1-0"))
}
