package exitorder

import (
	"net"
	"runtime"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// Reserve is how many descriptors at the top of the open-file limit the
// placed connections may take: Redis connections (pooled and pub/sub) and
// the admin port's (scrapes, probes, the cleaners' watches).
const Reserve = 512

// Placer places connections above its floor; the zero Placer places none.
type Placer struct {
	floor int
	base  int // New's floor, which Above keeps: where the anchor's set starts
	log   hclog.Logger
	once  *sync.Once // the first failure is logged, the rest are not
}

// New returns a Placer whose floor is past the descriptors that
// maxSockets client sockets and the process's other files take (1,024 of
// them), within the top Reserve descriptors of limit, the open-file limit.
// It places nothing when either is unknown (zero) or the floor would be
// below 1,024.
func New(maxSockets int, limit uint64, log hclog.Logger) Placer {
	if maxSockets <= 0 || limit == 0 {
		return Placer{}
	}
	top := int(min(limit, maxDescriptors(), 1<<40)) // RLIM_INFINITY is all ones
	floor := min(maxSockets+1024, top-Reserve)
	if floor < 1024 {
		return Placer{}
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return Placer{floor: floor, base: floor, log: log, once: new(sync.Once)}
}

// Floor is the lowest descriptor a placed connection takes; 0: none.
func (p Placer) Floor() int { return p.floor }

// Above returns a Placer whose floor is n descriptors above p's (n below
// Reserve): what it places closes before what p places, as long as p's
// connections number fewer than n.
func (p Placer) Above(n int) Placer {
	if p.floor != 0 {
		p.floor += n
	}
	return p
}

// Conn returns c placed above the floor, or c itself when it cannot be.
func (p Placer) Conn(c net.Conn) net.Conn {
	if p.floor == 0 || c == nil {
		return c
	}
	dup, err := dupAbove(c, p.floor)
	if err != nil {
		p.once.Do(func() {
			p.log.Warn("cannot place a connection above the client sockets' descriptors; a kill of this process may be seen later",
				"floor", p.floor, "error", err)
		})
		return c
	}
	mark(dup, p.base)
	pc := &placed{Conn: c, dup: dup}
	pc.cleanup = runtime.AddCleanup(pc, release, dup)
	if sc, ok := c.(syscall.Conn); ok {
		return &placedSys{placed: pc, sc: sc}
	}
	return pc
}

// Listener returns l whose accepted connections are placed.
func (p Placer) Listener(l net.Listener) net.Listener {
	if p.floor == 0 {
		return l
	}
	return &listener{Listener: l, p: p}
}

type listener struct {
	net.Listener
	p Placer
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.p.Conn(c), nil
}

// placed is a connection with a duplicate of its descriptor above the floor.
type placed struct {
	net.Conn
	dup  int
	once sync.Once
	// cleanup closes dup if the connection is collected unclosed; Close
	// stops it, since the number may then belong to another file.
	cleanup runtime.Cleanup
}

func (c *placed) Close() error {
	c.once.Do(func() {
		c.cleanup.Stop()
		release(c.dup)
	})
	return c.Conn.Close()
}

// CloseWrite is net/http's half-close before a lingering close.
func (c *placed) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// placedSys keeps syscall.Conn, which go-redis's idle-connection check
// uses, for connections that had it.
type placedSys struct {
	*placed
	sc syscall.Conn
}

func (c *placedSys) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// release closes a placed connection's duplicate, which the anchor no
// longer shuts.
func release(dup int) {
	unmark(dup)
	_ = syscall.Close(dup)
}
