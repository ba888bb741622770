// Package protocol is the Pusher Channels wire protocol v7 without I/O: the
// event envelope and its codec, error and close codes, socket ids, and the
// rules for channel names. Everything here is pure and safe for concurrent use.
package protocol
