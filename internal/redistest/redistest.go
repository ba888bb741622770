package redistest

import (
	"bytes"
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

// Server is one running redis-server.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	// hold keeps the address of a server KillAndHold killed.
	hold net.Listener
	// args are the options Recover starts it with again (NewDurable's).
	args []string
}

// PID is the redis-server process's id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// URL returns the server's redis:// URL (db 0).
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Client returns a client closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// KillAndHold kills the server and keeps its address bound until the test
// ends, closing every connection it accepts, so the server stays down:
// after a plain Kill the freed port may be handed to a server of another
// test process, which would then answer in its place.
func (s *Server) KillAndHold(t testing.TB) {
	t.Helper()
	s.Kill()
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatalf("hold the killed server's address %s: %v", s.Addr, err)
	}
	s.hold = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
}

// Restart starts a fresh, empty server on the same address after Kill or
// KillAndHold.
func (s *Server) Restart(t testing.TB, extra ...string) {
	t.Helper()
	s.Kill()
	if s.hold != nil { // KillAndHold's: the new server takes the address
		_ = s.hold.Close()
		s.hold = nil
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(port)
	ns := start(t, n, s.dir, extra...)
	s.cmd = ns.cmd
}

// Binary returns the redis-server path, failing the test if there is none.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: run `make test` (it installs it on Debian as root) or `apt-get install redis-server`")
	}
	return p
}

// New starts a single redis-server on a free loopback port.
func New(t testing.TB) *Server {
	t.Helper()
	return start(t, proctest.FreePort(t), t.TempDir())
}

func start(t testing.TB, port int, dir string, extra ...string) *Server {
	t.Helper()
	s, err := tryStart(t, port, dir, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tryStart starts redis-server on port and waits for it to answer; the
// server is killed when the test ends.
func tryStart(t testing.TB, port int, dir string, extra ...string) (*Server, error) {
	t.Helper()
	args := append([]string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--protected-mode", "no", "--loglevel", "warning",
	}, extra...)
	cmd := exec.Command(Binary(t), args...)
	cmd.Dir = dir
	out, err := os.Create(filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir}
	t.Cleanup(func() { s.Kill(); _ = out.Close() })
	return s, waitPing(s.Addr, out.Name())
}

func waitPing(addr, logFile string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		// A server that could not bind its ports has exited: say so now.
		log, _ := os.ReadFile(logFile)
		if time.Now().After(deadline) || bytes.Contains(log, []byte("aborting")) {
			return fmt.Errorf("redis-server on %s did not answer: %w\n%s", addr, err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Cluster is a running 3-master Redis Cluster without replicas.
type Cluster struct {
	Nodes []*Server
}

// Seeds returns the nodes' addresses, comma-separated as --redis-cluster takes them.
func (c *Cluster) Seeds() string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return strings.Join(addrs, ",")
}

// Client returns a cluster client closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(c.Seeds(), ",")})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// startClusterNode starts one redis-server in cluster mode, not yet part of
// any cluster. A port found free can be taken before redis-server binds it
// (the bus port is in the ephemeral range): it tries again on another.
func startClusterNode(t testing.TB) *Server {
	t.Helper()
	var node *Server
	var err error
	for try := 0; try < 3 && node == nil; try++ {
		dir := t.TempDir()
		if node, err = tryStart(t, clusterPort(t), dir,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000"); err != nil {
			node = nil
		}
	}
	if node == nil {
		t.Fatal(err)
	}
	return node
}

// NewCluster starts three masters, splits the 16384 slots between them and
// waits until every node reports cluster_state:ok.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range 3 {
		c.Nodes = append(c.Nodes, startClusterNode(t))
	}
	ctx := context.Background()
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = n.Client(t)
	}
	// Assign slots evenly, then introduce the nodes to each other.
	per := 16384 / len(c.Nodes)
	for i, cl := range clients {
		lo, hi := i*per, (i+1)*per-1
		if i == len(clients)-1 {
			hi = 16383
		}
		slots := make([]int, 0, hi-lo+1)
		for s := lo; s <= hi; s++ {
			slots = append(slots, s)
		}
		if err := cl.ClusterAddSlots(ctx, slots...).Err(); err != nil {
			t.Fatalf("cluster addslots: %v", err)
		}
	}
	host, port, _ := net.SplitHostPort(c.Nodes[0].Addr)
	for _, cl := range clients[1:] {
		p, _ := strconv.Atoi(port)
		if err := cl.ClusterMeet(ctx, host, strconv.Itoa(p)).Err(); err != nil {
			t.Fatalf("cluster meet: %v", err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				ok = false
				break
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("redis cluster did not reach cluster_state:ok with 3 known nodes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every node must also agree on the slot map before clients use it.
	cc := c.Client(t)
	deadline = time.Now().Add(10 * time.Second)
	for {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.Ping(ctx).Err()
		})
		slots, serr := cc.ClusterSlots(ctx).Result() //nolint:staticcheck // CLUSTER SHARDS needs Redis 7; SLOTS answers on every version the tests may meet
		if err == nil && serr == nil && len(slots) == 3 {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis cluster slot map incomplete: %v %v", err, serr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clusterPort returns a free loopback port P whose cluster bus port
// P+10000 is free too: a cluster node binds both, and with FreePort alone
// another test's socket on P+10000 made its start fail now and then. Both
// are below the ephemeral range, as FreePort's are.
func clusterPort(t testing.TB) int {
	t.Helper()
	lo, hi := proctest.PortRange()
	for range 100 {
		p, ok := proctest.FreePortIn(lo, hi-10000)
		if !ok {
			p = proctest.FreePort(t)
		}
		if p+10000 > 65535 {
			continue
		}
		if !proctest.Reserve(p+10000) || !proctest.Listenable(p+10000) {
			continue
		}
		return p
	}
	t.Fatal("no free loopback port P with P+10000 free for a cluster bus")
	return 0
}
