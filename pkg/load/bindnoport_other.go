//go:build !linux

package load

import "syscall"

// bindNoPort is Linux's IP_BIND_ADDRESS_NO_PORT; elsewhere bind(2) picks
// the port as usual.
func bindNoPort(_, _ string, _ syscall.RawConn) error { return nil }
