package wsnode_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/wsnode"
)

// clientFrame is a masked client frame of op.
func clientFrame(op byte, fin bool, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	default:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	}
	key := [4]byte{7, 1, 9, 3}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

// heapInUse is the process's Go heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// pendingWriteBytes is headcount_wsnode_pending_write_bytes, which only
// the event loop has (the goroutine transport's pongs wait in its
// reader, not in the process).
func pendingWriteBytes(t *testing.T, n *testNode) float64 {
	if os.Getenv("HC_TEST_TRANSPORT") == "goroutine" {
		return 0
	}
	return metricstest.Value(t, n.reg, "headcount_wsnode_pending_write_bytes")
}

// floodBound is what one flooding socket may make the node hold: the
// pongs owed up to the send queue's byte budget, and those of one read's
// worth of pings (the event loop reads 64 KiB at a time) decoded before
// reading pauses.
const floodBound = wsnode.MaxQueueBytes + 64<<10

// TestAPingFloodNobodyReadsIsThrottled: one socket sends 125-byte pings as
// fast as it can and never reads a pong. With the frame budget lifted,
// only the send queue's budget holds it: reading pauses once the pongs
// owed fill it, so the client's writes stall while the node holds no more
// than the bound (it held 250 MB within two seconds before).
func TestAPingFloodNobodyReadsIsThrottled(t *testing.T) {
	// Not parallel: it measures the heap, which other tests beside it
	// would grow.
	n := startNode(t)
	n.LiftFrameBudget()
	n.run(t)
	base := heapInUse()
	c := dialRawWith(t, smallReceiveBuffer, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")

	ping := clientFrame(0x9, true, bytes.Repeat([]byte("p"), 125))
	batch := bytes.Repeat(ping, 500)
	deadline := time.Now().Add(wait)
	stalled, sent := false, 0
	for !stalled && time.Now().Before(deadline) {
		require.NoError(t, c.SetWriteDeadline(time.Now().Add(time.Second)))
		k, err := c.Write(batch)
		sent += k
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			stalled = true
		case err != nil:
			t.Fatalf("the node cut the flood (%v) instead of pausing it, after %d bytes", err, sent)
		}
		require.LessOrEqual(t, pendingWriteBytes(t, n), float64(floodBound), "after %d bytes of pings", sent)
	}
	require.True(t, stalled, "the node read %d bytes of pings from a client that reads no pong", sent)
	t.Logf("the client's writes stalled after %d bytes", sent)
	require.LessOrEqual(t, pendingWriteBytes(t, n), float64(floodBound))
	grown := int64(heapInUse()) - int64(base) //nolint:gosec // G115: heap sizes
	require.Less(t, grown, int64(32<<20), "the heap grew %d bytes", grown)
}

// floodUntilCut sends flood, which is past the default frame budget, from
// a client that reads nothing, and requires the node to cut it for its
// frame rate with the heap within bounds.
func floodUntilCut(t *testing.T, flood []byte) {
	n := startNode(t).run(t)
	base := heapInUse()
	c := dialRawWith(t, smallReceiveBuffer, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(wait)))
	_, _ = c.Write(flood) // fails once the node is gone
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "frame_rate"))
	}, wait, tick, "the flood was not counted against the frame budget")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_connections_open"))
	}, wait, tick)
	require.LessOrEqual(t, pendingWriteBytes(t, n), float64(floodBound))
	grown := int64(heapInUse()) - int64(base) //nolint:gosec // G115: heap sizes
	require.Less(t, grown, int64(32<<20), "the heap grew %d bytes", grown)
}

// TestAPingFloodIsCutAtTheFrameBudget: pings count against the frame
// budget like messages (they were not counted at all).
func TestAPingFloodIsCutAtTheFrameBudget(t *testing.T) {
	// Not parallel: it measures the heap, which other tests beside it
	// would grow.
	floodUntilCut(t, bytes.Repeat(clientFrame(0x9, true, bytes.Repeat([]byte("p"), 125)), 20000))
}

// TestEmptyContinuationsAreCutAtTheFrameBudget: a message of empty
// continuations never grows, and cost a decode each without limit; each
// counts against the frame budget.
func TestEmptyContinuationsAreCutAtTheFrameBudget(t *testing.T) {
	// Not parallel: it measures the heap, which other tests beside it
	// would grow.
	flood := clientFrame(0x1, false, []byte(`{"event":`))
	flood = append(flood, bytes.Repeat(clientFrame(0x0, false, nil), 200000)...)
	floodUntilCut(t, flood)
}

// requireCloseCode reads frames until a close frame and requires code.
func requireCloseCode(t *testing.T, c *rawConn, code int) string {
	t.Helper()
	for {
		p, err := c.Read(wait)
		require.NoError(t, err, "no close frame")
		if cc := closeCode(p); cc != 0 {
			require.Equal(t, code, cc, "close frame %q", p)
			return p[2:]
		}
	}
}

// TestAHugeLengthIsRefusedAtTheHeader: a header claiming 2^62 bytes is
// closed with 1009 at once, not when the read limit's worth arrived.
func TestAHugeLengthIsRefusedAtTheHeader(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connectRaw(t, appKey)
	h := []byte{0x82, 0x80 | 127}
	h = binary.BigEndian.AppendUint64(h, 1<<62)
	_, err := c.Write(append(h, 1, 2, 3, 4))
	require.NoError(t, err)
	require.Contains(t, requireCloseCode(t, c, 1009), "read limited")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "frame_too_big"))
	}, wait, tick)
}

// TestACloseReasonNotUTF8Gets1007: RFC 6455 5.5.1, Autobahn 7.5.1; the
// reason was echoed back, itself invalid.
func TestACloseReasonNotUTF8Gets1007(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connectRaw(t, appKey)
	_, err := c.Write(clientFrame(0x8, true, []byte{0x03, 0xe8, 0xce, 0xba, 0xe1, 0xbd, 0xb9, 0xcf, 0x83, 0xce, 0xbc, 0xce, 0xb5, 0xed, 0xa0, 0x80, 0x65, 0x64, 0x69, 0x74, 0x65, 0x64}))
	require.NoError(t, err)
	requireCloseCode(t, c, 1007)
}

// TestAnUnmaskedFrameGets1002: RFC 6455 5.1 has the server fail the
// connection; it got a bare TCP close.
func TestAnUnmaskedFrameGets1002(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connectRaw(t, appKey)
	_, err := c.Write([]byte{0x89, 0x01, 'x'})
	require.NoError(t, err)
	require.Equal(t, "received unmasked frame from client", requireCloseCode(t, c, 1002))
}
