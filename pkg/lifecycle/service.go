package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// Service is the lifecycle every app (wsnode, cleaner, httpapi) shares:
//
//   - its New validates the options, wires everything and may bind
//     listeners, but dials nothing and starts no goroutine; a nil logger
//     discards logs;
//   - Run serves until its ctx ends or Stop is called, then releases
//     everything New acquired and returns nil after a clean stop, or the
//     error that stopped it. Run runs once: a second call returns
//     ErrRunTwice at once, and a call after a Stop that came first returns
//     nil at once (there is nothing left to serve, which is what the
//     caller asked for);
//   - Stop is idempotent and safe from any goroutine. Before Run it
//     releases what New acquired (listeners, Redis clients) before it
//     returns; during Run it makes Run stop and return, without waiting
//     for it; after Run it does nothing.
type Service interface {
	Run(ctx context.Context) error
	Stop()
}

// ErrRunTwice is what Run returns when it was called before.
var ErrRunTwice = errors.New("Run called twice")

// State keeps the promises of Service for an app: New registers what it
// acquires with Defer, Run wraps its body in State.Run, and Stop is
// State.Stop. Whoever ends the app's life (Run returning, or Stop before
// Run) releases, exactly once. The zero State is ready; it must not be
// copied after first use.
type State struct {
	mu       sync.Mutex
	phase    phase
	cancel   context.CancelFunc // Run's, while it runs
	releases []func()
}

type phase int

const (
	phaseNew      phase = iota
	phaseRunning        // Run owns the releases
	phaseDone           // Run returned, or Stop came first
	phaseReleased       // Stop came before Run
)

// Defer adds f to what is released when the app's life ends; releases run
// in the reverse order of their adding. Call it from New only.
func (s *State) Defer(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases = append(s.releases, f)
}

// Run runs body with a context that ends when ctx ends or Stop is called,
// then releases what was deferred, and returns body's error. See Service
// for a second Run (ErrRunTwice) and Run after Stop (nil at once).
func (s *State) Run(ctx context.Context, body func(ctx context.Context) error) error {
	s.mu.Lock()
	switch s.phase {
	case phaseReleased:
		s.mu.Unlock()
		return nil
	case phaseRunning, phaseDone:
		s.mu.Unlock()
		return ErrRunTwice
	}
	s.phase = phaseRunning
	ctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	s.mu.Unlock()
	defer s.release(phaseDone)
	defer cancel()
	return body(ctx)
}

// Stop ends Run's context, or, before Run, releases what was deferred
// before it returns. It is idempotent and safe from any goroutine.
func (s *State) Stop() {
	s.mu.Lock()
	switch s.phase {
	case phaseNew:
		s.phase = phaseReleased // under the lock: a Run from now on returns at once
		s.mu.Unlock()
		s.release(phaseReleased)
		return
	case phaseRunning:
		s.cancel()
	}
	s.mu.Unlock()
}

// release moves to phase p and runs the releases; each runs once, as
// release takes them.
func (s *State) release(p phase) {
	s.mu.Lock()
	rs := s.releases
	s.releases, s.phase = nil, p
	s.mu.Unlock()
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i]()
	}
}
