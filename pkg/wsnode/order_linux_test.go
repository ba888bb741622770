package wsnode_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/fanout"
)

// TestABurstIsWrittenInMemoryOrder: a node writes an event's subscribers
// in the order their state lies in memory, which for sockets accepted one
// after another is about the order they connected, for every event; not
// in the random order of the channel index's map. The order is read from
// the kernel: an epoll set lists its ready sockets in the order their data
// arrived, and one writer writes them one by one (on a busy machine the
// receive path may swap a few). Subscribers are counted in order if each
// arrived after the one that connected before it: 97-98% in memory order
// here, 77-80% in the map's.
func TestABurstIsWrittenInMemoryOrder(t *testing.T) {
	const subscribers = 300
	n := startNode(t, func(c *config.WSNode) { c.Transport = config.TransportEventLoop; c.Writers = 1 }).run(t)
	conns := make([]*rawConn, subscribers)
	fds := make(map[int32]int, subscribers) // client fd -> connection order
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(ep) })
	for i := range conns {
		c := dialSubscribed(t, n.Addr(), "fan")
		conns[i] = c
		fd := socketFD(t, c.Conn.Conn)
		fds[fd] = i
		require.NoError(t, unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, int(fd), &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: fd}))
	}
	for event := range 2 {
		n.Deliver(appID, fanout.Message{Channel: "fan", Event: "e", Data: `{}`})
		order := make([]int, 0, subscribers)
		events := make([]unix.EpollEvent, subscribers)
		deadline := time.Now().Add(30 * time.Second)
		for len(order) < subscribers && time.Now().Before(deadline) {
			k, err := unix.EpollWait(ep, events, 100)
			if err == unix.EINTR {
				continue
			}
			require.NoError(t, err)
			for _, e := range events[:k] {
				order = append(order, fds[e.Fd])
			}
		}
		require.Len(t, order, subscribers, "not every subscriber got the event")
		for _, c := range conns {
			require.Contains(t, c.read(t), `"event":"e"`) // drained: the next event is new data
		}
		inOrder := 0
		for i := 1; i < subscribers; i++ {
			if order[i] > order[i-1] {
				inOrder++
			}
		}
		t.Logf("event %d: %d of %d subscribers written after the one that connected before them", event+1, inOrder, subscribers-1)
		require.Greater(t, inOrder, subscribers*9/10, "event %d was not written in about the order the sockets connected", event+1)
	}
}

// socketFD is the descriptor under c, for an epoll set of the test's own
// (the runtime's poller keeps its registration).
func socketFD(t *testing.T, c net.Conn) int32 {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var fd int32
	require.NoError(t, raw.Control(func(f uintptr) { fd = int32(f) })) //nolint:gosec // G115: descriptors fit in int32
	return fd
}
