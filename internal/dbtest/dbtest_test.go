package dbtest

import "testing"

func TestServersStart(t *testing.T) {
	for name, start := range map[string]func(testing.TB) *Server{"postgres": NewPostgres, "mariadb": NewMariaDB} {
		t.Run(name, func(t *testing.T) {
			s := start(t)
			var n int
			if err := s.DB.QueryRow("SELECT 1").Scan(&n); err != nil || n != 1 {
				t.Fatalf("SELECT 1: %d, %v", n, err)
			}
			cpu, err := s.CPU()
			if err != nil || cpu <= 0 {
				t.Fatalf("CPU: %v, %v", cpu, err)
			}
			t.Log(s.URL, cpu)
		})
	}
}

// recorder notes whether a helper skipped or failed the test.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Skip(...any)           { r.skipped = true }
func (r *recorder) Fatal(...any)          { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }

// TestMissingBinary: a missing server skips the test, except under CI,
// where it fails it.
func TestMissingBinary(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	binary(r, "no-such-server-binary")
	if !r.skipped || r.failed {
		t.Fatalf("outside CI: skipped %v, failed %v", r.skipped, r.failed)
	}
	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	binary(r, "no-such-server-binary")
	if r.skipped || !r.failed {
		t.Fatalf("under CI: skipped %v, failed %v", r.skipped, r.failed)
	}
}
