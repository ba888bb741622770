// Package wstest is a WebSocket client on a bare net.Conn for tests and
// benchmarks: it starts no goroutines and holds no buffers beyond one
// bufio.Reader, so goroutine and memory figures measure the server alone,
// and thousands of idle clients cost the test process little.
package wstest
