package wsnode

import "github.com/headcount/headcount/pkg/protocol"

// link is a socket's connection as the node uses it, whichever transport
// serves the socket (--transport): goLink, a goroutine per socket on
// coder/websocket, or loopLink, the event loop (no goroutine while the
// socket is idle). The node's rules (queues, budgets, timeouts, close
// codes) live above it, once for both.
type link interface {
	// write sends f behind whatever is pending. goLink waits for room in the
	// socket's buffer, with writeSince set so the sweeper cuts a client
	// that stops reading; loopLink never waits.
	write(f frame) error
	// flush writes batch, in order, as far as it goes now, and reports how
	// many frames went out whole and whether the rest is pending. Pending
	// frames are the link's to finish: it calls the socket's flushDone,
	// from another goroutine, with how many more went out and the error
	// that stopped it, if any. Neither batch nor its frames are copied,
	// and neither may be modified: a delivery's batch is shared by its
	// subscribers (socket.push).
	flush(batch []frame) (sent int, pending bool, err error)
	// shut sends a close frame with code and reason behind whatever is
	// pending, then ends the connection once the client answers with its
	// own or a timeout passes. goLink waits for that (shutWaits); loopLink
	// returns at once.
	shut(code protocol.Code, reason string)
	shutWaits() bool
	// cut ends the connection at once, dropping anything pending.
	cut()
	// release ends the connection once the socket's handler is done with
	// it, unless a close handshake under way ends it.
	release()
	// sentClose is the code of the close frame sent on the connection (the
	// node's own, or its answer to the client's; 1005 for one without a
	// code), or 0 if none was.
	sentClose() uint16
}

// closeInvalidPayload is RFC 6455's 1007: a text message that is not UTF-8.
const closeInvalidPayload protocol.Code = 1007

// RFC 6455's codes that never travel in a close frame: a close frame
// without a code (1005), and a connection that ended without any (1006).
const (
	closeNoStatus uint16 = 1005
	closeAbnormal uint16 = 1006
)
