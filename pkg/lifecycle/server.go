package lifecycle

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/headcount/headcount/pkg/metrics"
)

// Readiness is a flag /readyz reports; it starts false.
type Readiness struct{ ready atomic.Bool }

// Set changes readiness.
func (r *Readiness) Set(v bool) { r.ready.Store(v) }

// Ready reports readiness.
func (r *Readiness) Ready() bool { return r.ready.Load() }

// AdminMux serves /metrics from reg, /healthz (200 while the process runs),
// /readyz (200 only while ready() is true, else 503) and the Go profiler
// under /debug/pprof/ (the admin port is for operators, never the public).
func AdminMux(reg *prometheus.Registry, ready func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/metrics", metrics.Handler(reg))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// Timeouts bound how long one connection may hold a server's goroutine and
// file descriptor in each phase of its life, so idle and slow clients are
// cut instead of piling up. A zero field takes AdminTimeouts' value: a
// server never waits forever.
type Timeouts struct {
	// Header bounds reading a request's headers, from its first byte;
	// never more than Read.
	Header time.Duration
	// Read bounds reading a whole request, headers and body, from its
	// first byte.
	Read time.Duration
	// Write bounds everything after the headers: reading the body, the
	// handler and writing the response. It must exceed the slowest handler.
	Write time.Duration
	// Idle bounds how long a keep-alive connection may wait for its next
	// request.
	Idle time.Duration
}

// AdminTimeouts are the admin servers' (/metrics, /healthz, /readyz,
// /debug/pprof/). Their requests have no body, so reading one takes
// milliseconds. Write leaves a minute for the largest answer, a full
// goroutine dump (?debug=2) of a wsnode with a goroutine per socket;
// /debug/pprof/profile and /trace move their own deadline out by the
// ?seconds= they run for, so the default 30 s profile is not cut. Idle
// outlasts a Prometheus scrape interval of up to a minute, so a scraper
// keeps its connection.
var AdminTimeouts = Timeouts{
	Header: 10 * time.Second,
	Read:   10 * time.Second,
	Write:  60 * time.Second,
	Idle:   120 * time.Second,
}

// withDefaults fills zero fields from AdminTimeouts and keeps Header within Read.
func (t Timeouts) withDefaults() Timeouts {
	if t.Header <= 0 {
		t.Header = AdminTimeouts.Header
	}
	if t.Read <= 0 {
		t.Read = AdminTimeouts.Read
	}
	if t.Write <= 0 {
		t.Write = AdminTimeouts.Write
	}
	if t.Idle <= 0 {
		t.Idle = AdminTimeouts.Idle
	}
	t.Header = min(t.Header, t.Read)
	return t
}

// Server is an http.Server bound before Run, so Addr is known at once
// (tests bind 127.0.0.1:0).
type Server struct {
	srv *http.Server
	ln  net.Listener
	// capped is ln when ListenCapped made the server, else nil.
	capped *capListener
}

// Listen binds addr and returns a server for h whose connections are
// bounded by t (see Timeouts).
func Listen(addr string, h http.Handler, t Timeouts) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	t = t.withDefaults()
	return &Server{ln: ln, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.Header,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
	}}, nil
}

// WrapListener replaces the listener with wrap's, before Serve.
func (s *Server) WrapListener(wrap func(net.Listener) net.Listener) { s.ln = wrap(s.ln) }

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Open is the number of connections open on a server from ListenCapped:
// what its portcap.Config.Max caps. It is 0 for a server from Listen.
func (s *Server) Open() int {
	if s.capped == nil {
		return 0
	}
	return int(s.capped.port.Open())
}

// Serve blocks until Shutdown; it returns nil on a clean shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close closes the listener and every connection at once. It is for a
// server that never served, or one already shut down (it is then a no-op),
// and may be called more than once.
func (s *Server) Close() {
	_ = s.srv.Close()
	_ = s.ln.Close() // Serve was never called: srv does not know ln
	s.waitRefused()
}

// Shutdown stops accepting and waits up to timeout for requests in flight.
// Hijacked connections (WebSockets) are not touched.
func (s *Server) Shutdown(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	_ = s.ln.Close() // Shutdown closed it, unless Serve was never called
	s.waitRefused()
}

// waitRefused waits for the goroutines of the connections a capped server
// refused, which its listener's close ends at once.
func (s *Server) waitRefused() {
	if s.capped != nil {
		s.capped.wait()
	}
}
