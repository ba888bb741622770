// Package clock holds the one way headcount waits out a delay: Sleep, which
// returns early when its context ends, so a retry's backoff or a pacing
// wait never outlives a shutdown. It imports nothing of headcount's, so any
// package may use it.
//
// Sleep is safe for concurrent use.
package clock
