package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// profileHold, when HC_PEER_TRACE names a directory, records what
// headcount's nodes do during a delivery measure's hold: a runtime/trace
// of the first node and a CPU profile of the second, two seconds each from
// the first event the first node receives, as <round>.trace and
// <round>.cpu.pprof (go tool trace -pprof=syscall <round>.trace says how
// long the writer spent in writev; docs/TRANSPORT.md, "Beside soketi").
// It runs beside the load and returns a wait for the files; soketi has no
// such port.
func profileHold(b *testing.B, c cluster) (wait func()) {
	dir := os.Getenv("HC_PEER_TRACE")
	if dir == "" || len(c.admin) < 2 {
		return func() {}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	base := filepath.Join(dir, strings.NewReplacer("/", "_", "=", "").Replace(b.Name()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !pollDelivered(ctx, c.admin[0]) {
			return
		}
		cpu := make(chan struct{})
		go func() {
			defer close(cpu)
			profileSave(ctx, b, "http://"+c.admin[1]+"/debug/pprof/profile?seconds=2", base+".cpu.pprof")
		}()
		profileSave(ctx, b, "http://"+c.admin[0]+"/debug/pprof/trace?seconds=2", base+".trace")
		<-cpu
	}()
	return func() { <-done; cancel() }
}

// pollDelivered waits until the node at admin has received an event from
// the bus, polling its metrics every 10 ms; false if ctx ends first.
func pollDelivered(ctx context.Context, admin string) bool {
	for ctx.Err() == nil {
		if metric(admin, "headcount_wsnode_messages_delivered_total") > 0 {
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	return false
}

func profileGet(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// profileSave writes what u answers to path; a failure is logged, not fatal: the
// measure stands without its profile.
func profileSave(ctx context.Context, b *testing.B, u, path string) {
	body, err := profileGet(ctx, u)
	if err == nil {
		err = os.WriteFile(path, body, 0o600)
	}
	if err != nil {
		b.Logf("profile %s: %v", u, err)
	}
}
