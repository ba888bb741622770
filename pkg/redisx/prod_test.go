package redisx_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/redisx"
)

// client parses args (and env) as a binary would and returns the client
// redisx builds from them, closed when the test ends.
func client(t *testing.T, env map[string]string, args ...string) redis.UniversalClient {
	t.Helper()
	cfg, err := config.ParseHTTPAPI(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	require.NoError(t, err)
	rdb, err := redisx.NewClient(cfg.Common)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// passwordFile writes pw to a file, with the newline editors add.
func passwordFile(t *testing.T, pw string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "password")
	require.NoError(t, os.WriteFile(p, []byte(pw+"\n"), 0o600))
	return p
}

// countsWork writes counts of several apps (several slots on a Cluster)
// through rdb with a node's recorder and reads them back with a store.
func countsWork(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	rec := counts.NewRecorder(rdb, "node-a", counts.RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t)})
	for i := range 6 {
		rec.Add(fmt.Sprintf("app%d", i), "presence-room", int64(i+1))
		rec.Add(fmt.Sprintf("app%d", i), "chat", 2)
	}
	require.NoError(t, rec.Flush(ctx))
	store := counts.NewStore(rdb, keyspace.Space{})
	for i := range 6 {
		n, err := store.Channel(ctx, fmt.Sprintf("app%d", i), "presence-room")
		require.NoError(t, err)
		require.EqualValues(t, i+1, n)
	}
	require.NoError(t, redisx.Ping(ctx, rdb))
	require.NoError(t, rec.Remove(ctx))
}

// TestTLSServer: a redis-server that speaks TLS only and requires client
// certificates serves counts to a client given the test CA and a client
// certificate by the settings; without the CA, without a client
// certificate, or in plain text, the client is refused with an error that
// says why.
func TestTLSServer(t *testing.T) {
	// Not parallel: whether a client without a certificate reads the
	// server's alert or only its reset is a race, which load tips.
	files := redistest.NewTLSFiles(t)
	srv := redistest.NewTLS(t, files, "yes")
	mutual := []string{"--redis", srv.URL(), "--redis-tls-ca", files.CA, "--redis-tls-cert", files.ClientCert, "--redis-tls-key", files.ClientKey}
	countsWork(t, client(t, nil, mutual...))
	// The same from the environment, as on Kubernetes.
	countsWork(t, client(t, map[string]string{
		"HEADCOUNT_REDIS": srv.URL(), "HEADCOUNT_REDIS_TLS_CA": files.CA,
		"HEADCOUNT_REDIS_TLS_CERT": files.ClientCert, "HEADCOUNT_REDIS_TLS_KEY": files.ClientKey,
	}))

	ctx := context.Background()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no CA", []string{"--redis", srv.URL()}, "certificate signed by unknown authority"},
		{"no client certificate", []string{"--redis", srv.URL(), "--redis-tls-ca", files.CA}, "certificate"},
		{"plain text", []string{"--redis", "redis://" + srv.Addr + "/0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := redisx.Ping(ctx, client(t, nil, tc.args...))
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
			t.Logf("refused: %v", err)
		})
	}
}

// TestTLSServerOptionalClientCert: with tls-auth-clients optional, the CA
// alone is enough.
func TestTLSServerOptionalClientCert(t *testing.T) {
	t.Parallel()
	files := redistest.NewTLSFiles(t)
	srv := redistest.NewTLS(t, files, "optional")
	countsWork(t, client(t, nil, "--redis", srv.URL(), "--redis-tls-ca", files.CA))
}

// TestPasswordCluster: a 3-master Cluster with requirepass and an ACL user
// serves counts through the URL form of --redis-cluster, and through bare
// seeds with --redis-username and --redis-password or
// --redis-password-file; without them it is refused.
func TestPasswordCluster(t *testing.T) {
	t.Parallel()
	sc := redistest.NewSecureCluster(t, "headcount", "cluster-secret-1")
	rdb := client(t, nil, "--redis-cluster", sc.URL())
	_, isCluster := rdb.(*redis.ClusterClient)
	require.True(t, isCluster, "the URL form is Cluster mode")
	countsWork(t, rdb)
	countsWork(t, client(t, map[string]string{"HEADCOUNT_REDIS_PASSWORD": sc.Password},
		"--redis-cluster", sc.Seeds(), "--redis-username", sc.User))
	countsWork(t, client(t, nil, "--redis-cluster", sc.Seeds(), "--redis-username", sc.User,
		"--redis-password-file", passwordFile(t, sc.Password)))

	err := redisx.Ping(context.Background(), client(t, nil, "--redis-cluster", sc.Seeds()))
	require.Error(t, err)
	require.ErrorContains(t, err, "NOAUTH")
	t.Logf("refused: %v", err)
}

// sentinelBound is how long after the sentinels promote the replica the
// counts must be exact again: a node's flushes fail while there is no
// master, a failed flush makes the node replace its whole contribution
// (its outcome is unknown), and the retries back off up to the heartbeat.
const sentinelBound = 5 * time.Second

// TestSentinelFailover: through Sentinel (three sentinels, a master with a
// password, one replica), a node's counts are written; the master is
// killed (SIGKILL) while the node keeps changing them, the sentinels
// promote the replica, and the counts in Redis equal the node's own within
// sentinelBound of the promotion. The failover client is a *redis.Client:
// every branch on *redis.ClusterClient treats it as a single server.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	began := time.Now()
	s := redistest.NewSentinels(t, "master-secret-1")
	t.Logf("sentinels up in %v", time.Since(began).Round(time.Millisecond))
	rdb := client(t, map[string]string{"HEADCOUNT_REDIS_PASSWORD": s.Password},
		"--redis-sentinel", s.Addrs(), "--redis-sentinel-master", redistest.SentinelMaster)
	_, isClient := rdb.(*redis.Client)
	require.True(t, isClient, "a Sentinel master is a *redis.Client, not a %T", rdb)

	ctx, cancel := context.WithCancel(context.Background())
	rec := counts.NewRecorder(rdb, "node-a", counts.RecorderOptions{Heartbeat: 100 * time.Millisecond, Coalesce: 5 * time.Millisecond, Logger: logging.TestLogger(t)})
	var wg sync.WaitGroup
	wg.Go(func() { _ = rec.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	store := counts.NewStore(rdb, keyspace.Space{})
	exact := func() bool {
		for _, app := range []string{"app1", "app2"} {
			got, err := store.Channels(ctx, app, "")
			if err != nil {
				return false
			}
			want := map[string]int64{}
			for ch, n := range rec.Local(app) {
				if n > 0 {
					want[ch] = n
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return false
			}
		}
		return true
	}
	change := func(i int) {
		rec.Add("app1", fmt.Sprintf("ch%d", i%7), 1)
		rec.Add("app2", fmt.Sprintf("ch%d", i%5), 1)
		if i%3 == 0 {
			rec.Add("app1", fmt.Sprintf("ch%d", i%7), -1)
		}
	}
	for i := range 50 {
		change(i)
	}
	require.Eventually(t, exact, 5*time.Second, 20*time.Millisecond, "counts before the failover")
	s.WaitReplicated(t)

	s.Master.Kill()
	killed := time.Now()
	// Changes keep coming while the sentinels notice and promote.
	for i := 50; i < 80; i++ {
		change(i)
		time.Sleep(50 * time.Millisecond)
	}
	s.WaitFailover(t, 20*time.Second)
	promoted := time.Now()
	t.Logf("replica promoted %v after the kill", promoted.Sub(killed).Round(time.Millisecond))
	for i := 80; i < 100; i++ {
		change(i)
	}
	require.Eventually(t, exact, sentinelBound, 20*time.Millisecond, "counts %v after the promotion", sentinelBound)
	t.Logf("counts exact %v after the promotion", time.Since(promoted).Round(time.Millisecond))
}

// TestSentinelFailoverHealsALostWrite: a change the master acknowledged
// and never replicated (the replica was cut off: stopped, its link killed)
// is missing on the promoted replica, yet the counts are exact within
// sentinelBound of the promotion, because the node's heartbeats failed
// while there was no master and it replaced its contribution. A node that
// wrote nothing during the whole failover would not notice; with
// heartbeats every second and a failover taking the sentinels'
// down-after-milliseconds and more, no running node is in that case.
func TestSentinelFailoverHealsALostWrite(t *testing.T) {
	t.Parallel()
	s := redistest.NewSentinels(t, "master-secret-1")
	// The master's password from a file, as the master's and the
	// promoted replica's connections read it.
	rdb := client(t, map[string]string{"HEADCOUNT_REDIS_PASSWORD_FILE": passwordFile(t, s.Password)},
		"--redis-sentinel", s.Addrs(), "--redis-sentinel-master", redistest.SentinelMaster)
	ctx, cancel := context.WithCancel(context.Background())
	rec := counts.NewRecorder(rdb, "node-a", counts.RecorderOptions{Heartbeat: 100 * time.Millisecond, Logger: logging.TestLogger(t)})
	var wg sync.WaitGroup
	wg.Go(func() { _ = rec.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	store := counts.NewStore(rdb, keyspace.Space{})
	count := func(st *counts.Store) int64 {
		n, err := st.Channel(ctx, "app1", "room")
		if err != nil {
			return -1
		}
		return n
	}
	rec.Add("app1", "room", 3)
	require.Eventually(t, func() bool { return count(store) == 3 }, 5*time.Second, 10*time.Millisecond)
	s.WaitReplicated(t)

	// Cut the replica off: stopped, and its link closed by the master, so
	// the next change reaches the master only.
	require.NoError(t, syscall.Kill(s.Replica.PID(), syscall.SIGSTOP))
	mc := redis.NewClient(&redis.Options{Addr: s.Master.Addr, Password: s.Password})
	require.NoError(t, mc.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err())
	_ = mc.Close()
	rec.Add("app1", "room", 2)
	require.Eventually(t, func() bool { return count(store) == 5 }, 5*time.Second, 10*time.Millisecond, "acknowledged by the master")
	s.Master.Kill()
	require.NoError(t, syscall.Kill(s.Replica.PID(), syscall.SIGCONT))
	replica := redis.NewClient(&redis.Options{Addr: s.Replica.Addr, Password: s.Password})
	defer replica.Close()
	require.EqualValues(t, 3, count(counts.NewStore(replica, keyspace.Space{})), "the replica never got the change")

	s.WaitFailover(t, 20*time.Second)
	promoted := time.Now()
	require.Eventually(t, func() bool { return count(store) == 5 }, sentinelBound, 20*time.Millisecond, "counts %v after the promotion", sentinelBound)
	t.Logf("lost change restored %v after the promotion", time.Since(promoted).Round(time.Millisecond))
}
