package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a loopback TCP proxy in front of a server that can partition
// its clients from it: while partitioned, every byte either way is dropped
// and nothing is closed, so clients see timeouts, as behind a dead link,
// not errors. Heal closes the connections that lived through the partition
// (their state is unknown, as after a real one) and forwards new ones again.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[*proxyConn]struct{}
}

// proxyConn is one client connection and, unless it was accepted during a
// partition, its connection to the target.
type proxyConn struct {
	client, server net.Conn
	cut            atomic.Bool // its bytes are dropped; Heal closes it
	once           sync.Once
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		_ = c.client.Close()
		if c.server != nil {
			_ = c.server.Close()
		}
	})
}

// NewProxy listens on a free loopback port and forwards to targetAddr
// (host:port) until the test ends.
func NewProxy(t testing.TB, targetAddr string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: targetAddr, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's redis:// URL (db 0).
func (p *Proxy) URL() string { return "redis://" + p.Addr() + "/0" }

// Partition starts dropping every byte of every connection, existing and new.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.cut.Store(true)
	}
}

// Heal ends a partition: connections that existed during it are closed,
// new ones are forwarded.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	var old []*proxyConn
	for c := range p.conns {
		if c.cut.Load() {
			old = append(old, c)
			delete(p.conns, c)
		}
	}
	p.mu.Unlock()
	for _, c := range old {
		c.close()
	}
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	all := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	clear(p.conns)
	p.mu.Unlock()
	for _, c := range all {
		c.close()
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		c := &proxyConn{client: client}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if !cut {
			// Dialled before registering: a partition starting
			// meanwhile still finds the connection complete.
			if c.server, err = net.Dial("tcp", p.target); err != nil {
				_ = client.Close()
				continue
			}
		}
		p.mu.Lock()
		if p.closed || (!p.cut && c.server == nil) {
			// Closed, or healed while accepting it (closed as Heal would
			// have): nothing may outlive Close.
			p.mu.Unlock()
			c.close()
			continue
		}
		if p.cut {
			c.cut.Store(true)
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pump(c, c.client, c.server) })
		if c.server != nil {
			p.wg.Go(func() { p.pump(c, c.server, c.client) })
		}
	}
}

// pump copies src to dst (dst nil: nowhere), dropping what it reads while
// c is cut. The target closing during a partition is not passed on: the
// client must not learn anything until the partition heals.
func (p *Proxy) pump(c *proxyConn, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.cut.Load() && dst != nil {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if src == c.server && c.cut.Load() {
				return // Heal or Close closes the client
			}
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
			c.close()
			return
		}
	}
}
