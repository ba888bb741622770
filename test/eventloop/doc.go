// Package eventloop is a measured prototype, not a transport wsnode uses: a
// Pusher WebSocket endpoint served by one epoll loop over raw file
// descriptors (Linux only), with no goroutine parked per idle socket, and
// BenchmarkIdleSockets, which measures what one idle, subscribed socket
// costs it next to a wsnode in the same run. docs/TRANSPORT.md weighs
// moving wsnode onto such a loop on these numbers.
//
// It has no tests: `make test` only compiles it. Run the benchmark alone:
//
//	go test -run '^$' -bench IdleSockets -benchtime 1x ./test/eventloop/
package eventloop
