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
