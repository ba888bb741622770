// Package wsframe is the WebSocket codec of wsnode's event-loop
// transport: a Decoder per connection for the frames a client sends, the
// frames the server sends, and the opening handshake. It behaves as
// coder/websocket v1.8.15 does as wsnode runs it (websocket.Accept with
// InsecureSkipVerify and compression off, SetReadLimit, whole messages
// read with Conn.Reader, the connection closed at once with CloseNow when
// a read fails), which stays as the goroutine transport and is the oracle:
// TestAgainstCoder and FuzzAgainstCoder send the same client bytes to a
// coder/websocket server and to a Decoder and require the same bytes back.
//
// Guarantees:
//
//   - Decoder.Next takes the connection's bytes in any chunking; the
//     chunking never changes the events (FuzzDecoder).
//   - Zero copy where it can: a whole unfragmented message, or a control
//     frame, that lies in Next's input is unmasked in place and returned
//     aliasing the input, with no allocation. Only a frame split across
//     reads and the fragments of a message in progress are copied.
//   - An idle Decoder (between messages, no partial frame) holds no buffer
//     and is 40 bytes; a Decoder holds at most the read limit of a
//     message's bytes (plus one partial header or control payload).
//   - Text messages are not checked for UTF-8, as coder does not: wsnode
//     checks the whole message itself and closes with 1007.
//   - NextN counts the frames it starts (every header: data, control,
//     empty continuation) and stops before the first frame past its
//     budget, so wsnode charges each frame to the socket's budget before
//     acting on it.
//
// What coder/websocket does with each client misbehaviour, and so Next
// (Reply is the frame the server sends back; "1006" means it sends none
// and just closes the connection; every Fail and Close ends the
// connection at once, without waiting for the client). Three rows, marked
// "node", part from coder on purpose, as wsnode's goroutine transport
// does too (its socketConn checks them before coder reads the frame):
//
//	RSV1, RSV2 or RSV3 set               Fail 1002 "received header with unexpected rsv bits set: true:false:false"
//	unmasked frame                       node: Fail 1002 "received unmasked frame from client" (RFC 6455
//	                                     5.1; coder closes with no close frame); after the RSV check
//	64-bit length with its top bit set   Fail 1006
//	opcode 3-7 or 11-15                  Fail 1002 "received unknown opcode opcode(3)"
//	control frame payload > 125          Fail 1002 "received control frame payload with invalid length: 126"
//	control frame without FIN            Fail 1002 "received fragmented control frame"
//	continuation, no message started     Fail 1002 "received continuation frame without text or binary frame"
//	text/binary inside a message         Fail 1002 "received new data message without finishing the previous message"
//	message over the limit L             node: Fail 1009 "read limited at L+1 bytes" as soon as a data
//	                                     frame's header claims a length that takes the message past L
//	                                     (coder waits until L+1 bytes arrived, so a header claiming
//	                                     2^62 bytes held the socket with nothing sent)
//	close frame with a 1-byte payload    Fail 1002 "received invalid close payload: close payload "\x03" too small, ..."
//	close code 1004-1006, 1015, <1000,   Fail 1002 "received invalid close payload: invalid status code StatusCode(999)"
//	1016-2999, >4999                     (the code as coder's stringer names it)
//	close reason not UTF-8               node: Fail 1007 "received invalid close payload: the reason is
//	                                     not UTF-8" (RFC 6455 5.5.1, Autobahn 7.5.1; coder echoes it)
//	client close frame                   Close; Reply echoes its code and reason; an empty payload
//	                                     gives Code 1005 and an empty close frame back
//	ping                                 Ping; Reply is a pong echoing its payload
//	pong                                 Pong; no reply
//	control frames between fragments     allowed, handled in order
//	non-minimal length encodings         accepted
//	end of stream                        see Decoder.EOF: inside a message, at a read boundary, coder
//	                                     delivers the part received as a whole message
//
// A reason too long for a close frame (over 123 bytes) becomes 1011 with
// no reason, as coder's CloseError.bytes does; no reason above is that
// long. coder also gives a control frame's payload 5 seconds to arrive
// once its header has; Decoder has no clock (wsnode's sweeper closes
// silent sockets).
//
// After the server sent its own close frame (Conn.Close, from the reading
// goroutine as wsnode does for invalid UTF-8 or a refusal), coder waits up
// to 5 s for the client's, sending nothing more: data frames are skipped
// unchecked, a client close frame or any protocol error ends the
// connection, and so does a ping (its pong cannot follow a close frame).
// Decoder.SentClose switches a Decoder to that (TestAfterCloseAgainstCoder);
// the 5 s are the loop's. When the close comes from another goroutine
// while the reader is inside a message, coder's behaviour depends on which
// goroutine takes the read lock; SentClose follows waitCloseHandshake.
//
// A Decoder is not safe for concurrent use; everything else is pure and
// safe for concurrent use.
package wsframe
