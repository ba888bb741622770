// Command floorhttp is the floor BenchmarkGetChannel (test/e2e) compares
// httpapi with: a bare net/http server that answers every request with one
// pipelined Redis round trip (a score and a rank from its own sorted set of
// 1,000 members) and a small JSON body, and nothing else: no signature, no
// metrics, no logs. The benchmark builds and starts it, and kills it.
//
//	floorhttp -addr 127.0.0.1:9000 -redis redis://127.0.0.1:6379/0
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"github.com/redis/go-redis/v9"
)

const key = "floor-bench"

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis URL")
	flag.Parse()
	if err := run(*addr, *redisURL); err != nil {
		fmt.Fprintln(os.Stderr, "floorhttp:", err)
		os.Exit(1)
	}
}

func run(addr, redisURL string) error {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	members := make([]redis.Z, 1000)
	for i := range members {
		members[i] = redis.Z{Score: float64(i), Member: fmt.Sprintf("bench-%05d", i)}
	}
	if err := rdb.ZAdd(context.Background(), key, members...).Err(); err != nil {
		return err
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
	// No timeouts: the floor is a bare server, on loopback, for a benchmark.
	return http.ListenAndServe(addr, h)
}
