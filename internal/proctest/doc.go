// Package proctest holds helpers for tests that run real processes: free
// loopback ports, a buffer safe to read while a process writes to it, a
// child's environment without the caller's settings, memory readings and
// CPU affinity.
package proctest
