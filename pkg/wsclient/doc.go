// Package wsclient is a WebSocket client on a bare net.Conn, for the load
// tool (hcload, pkg/load) and the tests: it starts no goroutines and holds
// no buffers beyond one bufio.Reader, so thousands of idle clients cost
// their process little, and goroutine and memory figures measure the
// server alone. It speaks only what a Pusher client needs: the upgrade,
// masked text frames out, and frames in, one at a time.
package wsclient
