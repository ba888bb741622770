package eventloop

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/headcount/headcount/pkg/protocol"
)

// Server is the prototype: one goroutine runs an epoll loop over a
// listening socket and every accepted one. An idle socket costs a conn (a
// few words, no buffer), an epoll registration and its kernel socket; no
// goroutine, no stack.
type Server struct {
	listenFD, epollFD int
	addr              string
	// conns is indexed by file descriptor; nil where none is open.
	conns []*conn
	// readBuf is shared by every socket: the loop reads one at a time.
	readBuf [4096]byte
	nextID  uint64
}

// conn is one accepted socket. Both slices are nil while it is idle: head
// lives only until the handshake, partial only while a frame is split
// across reads.
type conn struct {
	head     []byte // the request head read so far
	partial  []byte // the start of a frame not read whole yet
	upgraded bool
}

// maxHead bounds a request head, as wsnode's front does.
const maxHead = 16 << 10

// Listen opens a non-blocking listening socket on addr, a loopback
// host:port (port 0 picks one), and its epoll set.
func Listen(addr string) (*Server, error) {
	tcp, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return nil, err
	}
	if !tcp.IP.IsLoopback() {
		return nil, errors.New("the prototype listens on loopback only")
	}
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	s := &Server{listenFD: lfd, epollFD: -1}
	sa := &syscall.SockaddrInet4{Port: tcp.Port}
	copy(sa.Addr[:], tcp.IP.To4())
	if err = syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err == nil {
		err = syscall.Bind(lfd, sa)
	}
	if err == nil {
		err = syscall.Listen(lfd, 4096)
	}
	if err == nil {
		s.epollFD, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	}
	if err == nil {
		err = s.watch(lfd)
	}
	if err == nil {
		var bound syscall.Sockaddr
		if bound, err = syscall.Getsockname(lfd); err == nil {
			s.addr = net.JoinHostPort(tcp.IP.String(), strconv.Itoa(bound.(*syscall.SockaddrInet4).Port))
		}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Addr is the bound host:port.
func (s *Server) Addr() string { return s.addr }

// watch adds fd to the epoll set, level-triggered: a socket not read to
// the end is reported again.
func (s *Server) watch(fd int) error {
	return syscall.EpollCtl(s.epollFD, syscall.EPOLL_CTL_ADD, fd,
		&syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)})
}

// Serve runs the loop until stop is closed, checking it every 100 ms.
// epoll_wait holds an OS thread; the runtime runs other goroutines on
// another.
func (s *Server) Serve(stop <-chan struct{}) error {
	events := make([]syscall.EpollEvent, 256)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		n, err := syscall.EpollWait(s.epollFD, events, 100)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			if fd := int(ev.Fd); fd == s.listenFD {
				s.accept()
			} else {
				s.readable(fd)
			}
		}
	}
}

// Close closes every socket, the listener and the epoll set.
func (s *Server) Close() {
	for fd, c := range s.conns {
		if c != nil {
			_ = syscall.Close(fd)
		}
	}
	s.conns = nil
	_ = syscall.Close(s.listenFD)
	if s.epollFD >= 0 {
		_ = syscall.Close(s.epollFD)
	}
}

func (s *Server) accept() {
	for {
		fd, _, err := syscall.Accept4(s.listenFD, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				time.Sleep(5 * time.Millisecond) // the backlog waits; wsnode's front backs off too
			}
			return // EAGAIN: accepted all; anything else: try on the next event
		}
		if err := s.watch(fd); err != nil {
			_ = syscall.Close(fd)
			continue
		}
		for fd >= len(s.conns) {
			s.conns = append(s.conns, nil)
		}
		s.conns[fd] = &conn{}
	}
}

// readable serves one read from fd: the request head, or frames.
func (s *Server) readable(fd int) {
	c := s.conns[fd]
	if c == nil {
		return
	}
	n, err := syscall.Read(fd, s.readBuf[:])
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
		return
	}
	if err != nil || n == 0 {
		s.drop(fd)
		return
	}
	data := s.readBuf[:n]
	if !c.upgraded {
		c.head = append(c.head, data...)
		end := bytes.Index(c.head, []byte("\r\n\r\n"))
		if end < 0 {
			if len(c.head) > maxHead {
				s.drop(fd)
			}
			return
		}
		rest := c.head[end+4:]
		if !s.handshake(fd, c.head[:end]) {
			s.drop(fd)
			return
		}
		c.upgraded = true
		data = bytes.Clone(rest)
		c.head = nil
	}
	if len(c.partial) > 0 {
		data = append(c.partial, data...)
		c.partial = nil
	}
	for len(data) > 0 {
		fin, opcode, payload, size, ok := parseFrame(data)
		if !ok {
			if size > 64<<10 {
				s.drop(fd) // wsnode's read limit is 16 KiB
				return
			}
			c.partial = bytes.Clone(data)
			return
		}
		data = data[size:]
		if !fin {
			s.drop(fd) // fragmented messages: left out
			return
		}
		if !s.frame(fd, opcode, payload) {
			s.drop(fd)
			return
		}
	}
}

// handshake answers a request head with 101 and pusher:connection_established
// in one write, and reports whether the socket is upgraded.
func (s *Server) handshake(fd int, head []byte) bool {
	line, headers, _ := bytes.Cut(head, []byte("\r\n"))
	if !bytes.HasPrefix(line, []byte("GET /app/")) {
		return false
	}
	var key []byte
	for _, h := range bytes.Split(headers, []byte("\r\n")) {
		if name, value, ok := bytes.Cut(h, []byte(":")); ok && bytes.EqualFold(name, []byte("Sec-WebSocket-Key")) {
			key = bytes.TrimSpace(value)
		}
	}
	if len(key) == 0 {
		return false
	}
	sum := sha1.Sum(append(key, "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"...))
	out := make([]byte, 0, 512)
	out = append(out, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	out = base64.StdEncoding.AppendEncode(out, sum[:])
	out = append(out, "\r\n\r\n"...)
	s.nextID++
	id := strconv.FormatUint(s.nextID, 10) + "." + strconv.Itoa(fd)
	var msg [128]byte
	out = appendFrame(out, 0x1, protocol.AppendConnectionEstablished(msg[:0], id, protocol.ActivityTimeout))
	return s.write(fd, out)
}

// frame handles one client frame: pusher:subscribe and pusher:ping get
// their replies, a close frame its echo, a ping its pong.
func (s *Server) frame(fd int, opcode byte, payload []byte) bool {
	var out [256]byte
	switch opcode {
	case 0x1:
		f, err := protocol.Decode(payload)
		if err != nil {
			return true
		}
		switch f.Event {
		case protocol.EventPing:
			return s.write(fd, appendFrame(out[:0], 0x1, []byte(protocol.Pong)))
		case protocol.EventSubscribe:
			sub, err := f.Subscribe()
			if err != nil {
				return true
			}
			var msg [256]byte
			return s.write(fd, appendFrame(out[:0], 0x1, protocol.AppendSubscriptionSucceeded(msg[:0], sub.Channel)))
		}
		return true
	case 0x8:
		_ = s.write(fd, appendFrame(out[:0], 0x8, payload[:min(len(payload), 2)]))
		return false
	case 0x9:
		return s.write(fd, appendFrame(out[:0], 0xA, payload))
	}
	return true
}

// write writes b whole or reports false: a socket whose send buffer is full
// is dropped (write backpressure is left out).
func (s *Server) write(fd int, b []byte) bool {
	n, err := syscall.Write(fd, b)
	return err == nil && n == len(b)
}

func (s *Server) drop(fd int) {
	_ = syscall.EpollCtl(s.epollFD, syscall.EPOLL_CTL_DEL, fd, nil)
	_ = syscall.Close(fd)
	s.conns[fd] = nil
}

// parseFrame reads a client (masked) frame at the start of b and unmasks
// its payload in place; ok is false if b does not hold all of it, size
// then being its length if known.
func parseFrame(b []byte) (fin bool, opcode byte, payload []byte, size int, ok bool) {
	if len(b) < 2 {
		return false, 0, nil, 0, false
	}
	fin, opcode = b[0]&0x80 != 0, b[0]&0x0f
	header, n := 2, uint64(b[1]&0x7f)
	switch n {
	case 126:
		header += 2
	case 127:
		header += 8
	}
	masked := b[1]&0x80 != 0
	if masked {
		header += 4
	}
	if len(b) < header {
		return false, 0, nil, 0, false
	}
	switch n {
	case 126:
		n = uint64(binary.BigEndian.Uint16(b[2:]))
	case 127:
		n = binary.BigEndian.Uint64(b[2:])
	}
	if n > 1<<30 {
		return false, 0, nil, 1 << 30, false
	}
	size = header + int(n)
	if len(b) < size {
		return false, 0, nil, size, false
	}
	payload = b[header:size]
	if masked {
		mask := b[header-4 : header]
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
	}
	return fin, opcode, payload, size, true
}

// appendFrame appends an unmasked server frame.
func appendFrame(dst []byte, opcode byte, payload []byte) []byte {
	dst = append(dst, 0x80|opcode)
	switch n := len(payload); {
	case n < 126:
		dst = append(dst, byte(n))
	case n <= 0xffff:
		dst = binary.BigEndian.AppendUint16(append(dst, 126), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint64(append(dst, 127), uint64(n))
	}
	return append(dst, payload...)
}
