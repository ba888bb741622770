package redistest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
)

// exporterBinary is Debian's redis_exporter (package
// prometheus-redis-exporter; scripts/ensure-deps.sh installs it).
const exporterBinary = "prometheus-redis-exporter"

// Exporter is a running redis_exporter reading one Server.
type Exporter struct {
	// Addr is where it serves /metrics.
	Addr string
}

// NewExporter starts redis_exporter on a free loopback port, reading s
// with password (empty: none) from REDIS_PASSWORD as the chart's sidecar
// does, and waits until its /metrics says it reached Redis (redis_up 1).
// It is stopped when the test ends.
func NewExporter(t testing.TB, s *Server, password string) *Exporter {
	t.Helper()
	bin, err := exec.LookPath(exporterBinary)
	if err != nil {
		t.Fatalf("%s is not installed: run `make test` (it installs it on Debian as root) or `apt-get install prometheus-redis-exporter`", exporterBinary)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(proctest.FreePort(t)))
	cmd := exec.Command(bin, "-redis.addr", "redis://"+s.Addr, "-web.listen-address", addr)
	cmd.Env = proctest.Environ(map[string]string{"REDIS_PASSWORD": password}, "REDIS_")
	log, err := os.Create(filepath.Join(t.TempDir(), "redis_exporter.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", exporterBinary, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
	})
	e := &Exporter{Addr: addr}
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body := proctest.Get("http://"+addr+"/metrics", time.Second)
		if status == 200 && strings.Contains(body, "\nredis_up 1\n") {
			return e
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("%s on %s did not report redis_up 1 within 10 s (status %d)\n%s", exporterBinary, addr, status, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Metrics returns what the exporter's /metrics serves now.
func (e *Exporter) Metrics(t testing.TB) string {
	t.Helper()
	status, body := proctest.Get("http://"+e.Addr+"/metrics", 10*time.Second)
	if status != 200 {
		t.Fatalf("GET %s/metrics: %d %s", e.Addr, status, body)
	}
	return body
}
