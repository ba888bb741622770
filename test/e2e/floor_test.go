package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startFloorHTTP runs TestFloorHTTPServer in a child process (this test
// binary again) against the Redis at redisURL and returns the URL to load.
func startFloorHTTP(t testing.TB, redisURL string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	t.Setenv("HC_FLOOR_ADDR", addr)
	t.Setenv("HC_FLOOR_REDIS", redisURL)
	start(t, "floor-http", self, "-test.run=^TestFloorHTTPServer$", "-test.count=1")
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

// TestFloorHTTPServer is not a test: startFloorHTTP runs it in its own
// process to serve the floor BenchmarkGetChannel compares httpapi with. It
// answers every request with one pipelined Redis round trip (a score and a
// rank from its own sorted set of 1,000 members) and a small JSON body,
// and nothing else: no signature, no metrics, no logs.
func TestFloorHTTPServer(t *testing.T) {
	addr := os.Getenv("HC_FLOOR_ADDR")
	if addr == "" {
		t.Skip("the floor server for BenchmarkGetChannel; runs only when it starts it")
	}
	opt, err := redis.ParseURL(os.Getenv("HC_FLOOR_REDIS"))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	ctx := context.Background()
	const key = "floor-bench"
	members := make([]redis.Z, 1000)
	for i := range members {
		members[i] = redis.Z{Score: float64(i), Member: fmt.Sprintf("bench-%05d", i)}
	}
	if err := rdb.ZAdd(ctx, key, members...).Err(); err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pipe := rdb.Pipeline()
		score := pipe.ZScore(r.Context(), key, "bench-00042")
		rank := pipe.ZRevRank(r.Context(), key, "bench-00042")
		if _, err := pipe.Exec(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"occupied":true,"subscription_count":` + strconv.Itoa(int(score.Val())) + `,"rank":` + strconv.Itoa(int(rank.Val()+1)) + `}`))
	})
	t.Fatal(http.ListenAndServe(addr, h)) // until the benchmark kills it
}
