package redistest

import (
	"testing"

	"github.com/headcount/headcount/internal/proctest"
)

// durable makes a server write every change to its append-only file before
// it answers, as a production Redis with AOF and appendfsync always.
var durable = []string{"--appendonly", "yes", "--appendfsync", "always"}

// NewDurable starts a single redis-server with its append-only file on
// (appendfsync always), so that after Kill or KillAndHold, Recover brings
// it back with everything it answered: the state a real crash and restart
// leaves, consumer groups' pending entries and keys' TTLs included.
func NewDurable(t testing.TB) *Server {
	t.Helper()
	s := start(t, proctest.FreePort(t), t.TempDir(), durable...)
	s.args = durable
	return s
}

// Recover starts the server again (killing it first if it runs) on the same
// address, data directory and options: a NewDurable server loads its
// append-only file, as after a crash.
func (s *Server) Recover(t testing.TB) {
	t.Helper()
	s.Restart(t, s.args...)
}
