package e2e

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// startFloorHTTP builds and starts test/floorhttp against the Redis at
// redisURL and returns the URL to load.
func startFloorHTTP(t testing.TB, redisURL string) string {
	t.Helper()
	bin := filepath.Join(binaries(t), "floorhttp")
	build := exec.Command("go", "build", "-o", bin, "./test/floorhttp")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./test/floorhttp: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	start(t, "floor-http", bin, "-addr", addr, "-redis", redisURL)
	u := "http://" + addr + "/floor"
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return u
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("floor server at %s never answered: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
