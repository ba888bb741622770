package wsnode

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestSizes holds the sizes socket.go and docs/TRANSPORT.md state (on
// 64-bit platforms), which the idle memory per socket is made of: a
// change of a struct must change the claim too.
func TestSizes(t *testing.T) {
	t.Parallel()
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the sizes are stated for 64-bit platforms")
	}
	// 232: Go's 240-byte size class, which docs/TRANSPORT.md states.
	require.Equal(t, uintptr(232), unsafe.Sizeof(socket{}), "socket")
	require.Equal(t, uintptr(160), unsafe.Sizeof(loopLink{}), "loopLink")
}
