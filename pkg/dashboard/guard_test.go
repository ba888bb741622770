package dashboard

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostSet: the names are matched without case or a final dot.
func TestHostSet(t *testing.T) {
	require.Equal(t, map[string]bool{"dash.example.com": true, "ops.example": true},
		hostSet([]string{"dash.example.com.", "Ops.Example", ""}))
	require.Empty(t, hostSet(nil))
}
