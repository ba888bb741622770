package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/proctest"
)

// SentinelMaster is the master name the sentinels of NewSentinels monitor.
const SentinelMaster = "mymaster"

// Sentinels is a master, one replica and three sentinels (quorum 2) that
// monitor the master as SentinelMaster and fail over to the replica half a
// second after the master stops answering.
type Sentinels struct {
	Master, Replica *Server
	// Sentinels are the sentinel processes; Addrs their addresses.
	Sentinels []*Server
	// Password, if not empty, is required by the master and the replica
	// (requirepass and masterauth; the sentinels know it as auth-pass).
	Password string
}

// Addrs returns the sentinels' addresses, comma-separated as
// --redis-sentinel takes them.
func (s *Sentinels) Addrs() string {
	addrs := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		addrs[i] = n.Addr
	}
	return strings.Join(addrs, ",")
}

// SentinelBinary returns the command that runs a sentinel: redis-sentinel
// when installed (Debian's redis-sentinel package), else redis-server,
// which takes --sentinel.
func SentinelBinary(t testing.TB) (string, []string) {
	t.Helper()
	if p, err := exec.LookPath("redis-sentinel"); err == nil {
		return p, nil
	}
	return Binary(t), []string{"--sentinel"}
}

// NewSentinels starts a master with a replica and three sentinels on free
// loopback ports, and returns once every sentinel knows the replica and
// the other two sentinels, so a failover can be decided.
func NewSentinels(t testing.TB, password string) *Sentinels {
	t.Helper()
	s := &Sentinels{Password: password}
	// Passwords are set once the servers answer: start's readiness PING
	// has none.
	// A full sync starts at once, not after the default 5 s wait for
	// more replicas.
	s.Master = start(t, proctest.FreePort(t), t.TempDir(), "--repl-diskless-sync-delay", "0")
	host, port, _ := net.SplitHostPort(s.Master.Addr)
	replicaArgs := []string{"--replicaof", host, port, "--repl-diskless-sync-delay", "0"}
	if password != "" {
		replicaArgs = append(replicaArgs, "--masterauth", password)
	}
	s.Replica = start(t, proctest.FreePort(t), t.TempDir(), replicaArgs...)
	if password != "" {
		for _, n := range []*Server{s.Master, s.Replica} {
			c := redis.NewClient(&redis.Options{Addr: n.Addr})
			err := c.ConfigSet(context.Background(), "masterauth", password).Err()
			if err == nil {
				err = c.ConfigSet(context.Background(), "requirepass", password).Err()
			}
			_ = c.Close()
			if err != nil {
				t.Fatalf("set the password of %s: %v", n.Addr, err)
			}
		}
	}
	ctx := context.Background()
	rc := s.client(s.Replica.Addr)
	defer rc.Close()
	waitFor(t, 10*time.Second, "the replica to sync", func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})

	// Each sentinel is told its id, the replica and the other sentinels
	// up front (directives a sentinel writes into its own configuration),
	// so it need not wait for INFO (every 10 s) and hello messages (2 s)
	// to learn them.
	bin, pre := SentinelBinary(t)
	rhost, rport, _ := net.SplitHostPort(s.Replica.Addr)
	ports := []int{proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)}
	id := func(i int) string { return fmt.Sprintf("%040x", i+1) }
	for i, p := range ports {
		dir := t.TempDir()
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nloglevel warning\nsentinel myid %s\n"+
			"sentinel monitor %s %s %s 2\n"+
			"sentinel down-after-milliseconds %s 500\n"+
			"sentinel failover-timeout %s 5000\n"+
			"sentinel parallel-syncs %s 1\n"+
			"sentinel known-replica %s %s %s\n",
			p, dir, id(i), SentinelMaster, host, port, SentinelMaster, SentinelMaster, SentinelMaster, SentinelMaster, rhost, rport)
		for j, q := range ports {
			if j != i {
				conf += fmt.Sprintf("sentinel known-sentinel %s 127.0.0.1 %d %s\n", SentinelMaster, q, id(j))
			}
		}
		if password != "" {
			conf += fmt.Sprintf("sentinel auth-pass %s %s\n", SentinelMaster, password)
		}
		confFile := filepath.Join(dir, "sentinel.conf") // the sentinel rewrites it
		if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, append([]string{confFile}, pre...)...)
		logFile := filepath.Join(dir, "sentinel.log")
		out, err := os.Create(logFile)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		sn := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), cmd: cmd, dir: dir}
		t.Cleanup(func() { sn.Kill(); _ = out.Close() })
		if err := waitPing(sn.Addr, logFile); err != nil {
			t.Fatal(err)
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		waitFor(t, 20*time.Second, "sentinel "+sn.Addr+" to know the replica and the other sentinels", func() bool {
			reps, err := sc.Replicas(ctx, SentinelMaster).Result()
			if err != nil || len(reps) != 1 || strings.Contains(fmt.Sprint(reps[0]["flags"]), "down") {
				return false
			}
			others, err := sc.Sentinels(ctx, SentinelMaster).Result()
			return err == nil && len(others) == 2
		})
		_ = sc.Close()
	}
	return s
}

// MasterAddr asks the first live sentinel where the master is.
func (s *Sentinels) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		_ = sc.Close()
		if err == nil {
			return net.JoinHostPort(addr[0], addr[1]), nil
		}
		last = err
	}
	return "", last
}

// WaitFailover waits until the sentinels name the replica as the master
// and it answers as one.
func (s *Sentinels) WaitFailover(t testing.TB, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	rc := s.client(s.Replica.Addr)
	defer rc.Close()
	waitFor(t, within, "the sentinels to promote the replica", func() bool {
		addr, err := s.MasterAddr(ctx)
		if err != nil || addr != s.Replica.Addr {
			return false
		}
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
}

// client returns a client of one of the data servers, with the password.
func (s *Sentinels) client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Password: s.Password, MaxRetries: -1})
}

// WaitReplicated waits until the replica has everything the master has
// acknowledged so far (WAIT 1), so a failover loses nothing.
func (s *Sentinels) WaitReplicated(t testing.TB) {
	t.Helper()
	mc := s.client(s.Master.Addr)
	defer mc.Close()
	n, err := mc.Wait(context.Background(), 1, 5*time.Second).Result()
	if err != nil || n < 1 {
		t.Fatalf("WAIT 1 on the master: %d replicas, %v", n, err)
	}
}

func waitFor(t testing.TB, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
