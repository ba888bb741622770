//go:build !linux

package evloop

import "net"

// Server is a stub off Linux: Listen always fails.
type Server struct{}

// Listen fails off Linux with ErrUnsupported.
func Listen(string, Options) (*Server, error) { return nil, ErrUnsupported }

func (*Server) Addr() net.Addr { return nil }
func (*Server) Serve() error   { return ErrUnsupported }
func (*Server) Close() error   { return nil }
func (*Server) StopAccepting() {}
func (*Server) Stats() Stats   { return Stats{} }

// Conn is a stub off Linux: no connection is ever made.
type Conn struct{}

func (*Conn) Fd() int                       { return -1 }
func (*Conn) SetHandler(Handler)            {}
func (*Conn) RemoteAddr() net.Addr          { return nil }
func (*Conn) Write(...[]byte) (bool, error) { return false, ErrClosed }
func (*Conn) Pending() int                  { return 0 }
func (*Conn) PauseRead()                    {}
func (*Conn) ResumeRead()                   {}
func (*Conn) Close()                        {}
func (*Conn) Uncount()                      {}
func (*Conn) CloseAfterFlush()              {}
func (*Conn) CloseWrite() error             { return ErrClosed }
