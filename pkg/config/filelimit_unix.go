//go:build unix

package config

import "syscall"

// OpenFileLimit returns this process's soft limit on open files
// (RLIMIT_NOFILE). Go raises the soft limit to one under the hard limit
// when a program starts, so this follows the hard limit.
func OpenFileLimit() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return uint64(lim.Cur), true
}
