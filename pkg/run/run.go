// Package run holds what every binary's lifecycle shares: the admin HTTP
// server (/metrics, /healthz, /readyz) and a helper to serve an http.Server
// inside an oklog/run group. It installs no signal handlers; mains do.
package run

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

// Server is an http.Server bound before Run, so Addr is known at once
// (tests bind 127.0.0.1:0).
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr and returns a server for h.
func Listen(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Server{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve blocks until Shutdown; it returns nil on a clean shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting and waits up to timeout for requests in flight.
// Hijacked connections (WebSockets) are not touched.
func (s *Server) Shutdown(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
}
