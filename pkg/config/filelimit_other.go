//go:build !unix

package config

// OpenFileLimit reports no limit where RLIMIT_NOFILE does not exist.
func OpenFileLimit() (uint64, bool) { return 0, false }
