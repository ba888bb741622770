//go:build !linux

package wsnode

// peekReadable reports the socket readable at once elsewhere than on
// Linux: the socket's goroutine then waits in websocket.Conn's read path,
// on a larger stack.
func peekReadable(uintptr) bool { return true }
