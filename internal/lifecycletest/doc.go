// Package lifecycletest checks the apps against what package lifecycle
// promises. Contract runs the lifecycle.Service cases against an app that
// New built. Idle and SlowBody open the misbehaving client connections that
// the servers' timeouts (lifecycle.Timeouts) must cut: keep-alive
// connections left idle, and requests whose body never finishes arriving.
// Tests of every HTTP server use them against a real listener.
//
// A Conn is used by one goroutine at a time.
package lifecycletest
