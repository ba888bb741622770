package wsfront

import "time"

// HeadTimer is either front, whose head timeout a test shortens.
type HeadTimer interface {
	SetHeadTimeout(timeout, sweep time.Duration)
}

// SetHeadTimeout shortens the time a client has to send its request head,
// and its sweep period; call it before Serve.
func (f *rules) SetHeadTimeout(timeout, sweep time.Duration) {
	f.headTimeout, f.sweepEvery = timeout, sweep
}

// RealHeads are request heads captured from real clients, keyed by client;
// their path is /app/app-key.
var RealHeads = realHeads
