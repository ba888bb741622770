package apps

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLongest: the longest matching prefix wins, in any order; none
// matching is reported.
func TestLongest(t *testing.T) {
	rules := []Capacity{{"presence-", 1}, {"presence-room-vip-", 3}, {"presence-room-", 2}}
	p := func(c Capacity) string { return c.Prefix }
	for ch, want := range map[string]int{"presence-x": 1, "presence-room-1": 2, "presence-room-vip-1": 3} {
		c, ok := Longest(rules, p, ch)
		require.True(t, ok)
		require.Equal(t, want, c.Capacity, ch)
	}
	_, ok := Longest(rules, p, "private-x")
	require.False(t, ok)
}
