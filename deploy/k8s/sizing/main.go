// Command sizing measures what headcount's Redis entries and operations
// cost, with the real count scripts (pkg/counts), for docs/SCALING.md. It
// starts redis-server on a free loopback port (standalone, then as a
// one-node Redis Cluster owning every slot), runs bounded workloads and
// prints memory per entry (INFO memory, used_memory deltas) and Redis CPU
// per operation (INFO cpu, user+sys deltas, minus idle). CPU time is not
// inflated by waiting for a core, but a busy machine still slows each
// instruction: compare runs. About three minutes; redis-server must be on
// PATH.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
)

const app = "app-0001"

// parts is -only.
var parts string

var info = json.RawMessage(`{"name":"User 1234567"}`)

func main() {
	mode := flag.String("mode", "both", "standalone, cluster or both")
	only := flag.String("only", "", "memory or cpu (default: both)")
	flag.Parse()
	parts = *only
	for _, m := range []string{"standalone", "cluster"} {
		if *mode != "both" && *mode != m {
			continue
		}
		if err := measure(m == "cluster"); err != nil {
			fmt.Fprintln(os.Stderr, "sizing:", err)
			os.Exit(1)
		}
	}
}

type redisServer struct {
	cmd  *exec.Cmd
	addr string
	dir  string
}

func startRedis(cluster bool) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "sizing-redis-")
	if err != nil {
		return nil, err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	if cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"))
	}
	s := &redisServer{cmd: exec.Command("redis-server", args...), addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	return s, nil
}

func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	os.RemoveAll(s.dir)
}

func measure(cluster bool) error {
	srv, err := startRedis(cluster)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr, ReadTimeout: time.Minute})
	defer rdb.Close()
	for rdb.Ping(ctx).Err() != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	kind := "standalone"
	if cluster {
		kind = "cluster-enabled, one node owning all slots"
		if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
			return err
		}
		for !strings.Contains(rdb.ClusterInfo(ctx).Val(), "cluster_state:ok") {
			time.Sleep(50 * time.Millisecond)
		}
	}
	version := infoField(ctx, rdb, "server", "redis_version")
	fmt.Printf("\n## redis-server %s, %s\n\n| what | cost | n |\n|---|---:|---:|\n", version, kind)
	m := &meter{ctx: ctx, rdb: rdb, addr: srv.addr, cluster: cluster}
	if parts != "cpu" {
		m.memory()
	}
	if parts != "memory" {
		m.cpu()
	}
	return nil
}

type meter struct {
	ctx     context.Context
	rdb     *redis.Client
	addr    string
	cluster bool
}

func infoField(ctx context.Context, rdb *redis.Client, section, field string) string {
	for _, l := range strings.Split(rdb.Info(ctx, section).Val(), "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}

// used is used_memory after freeing what the allocator can.
func (m *meter) used() int64 {
	m.rdb.Do(m.ctx, "MEMORY", "PURGE")
	n, _ := strconv.ParseInt(infoField(m.ctx, m.rdb, "memory", "used_memory"), 10, 64)
	return n
}

// settled waits for the server's cron to shrink idle clients' buffers.
func (m *meter) settled() int64 { time.Sleep(5 * time.Second); return m.used() }

func (m *meter) cpuSec() float64 {
	var t float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, _ := strconv.ParseFloat(infoField(m.ctx, m.rdb, "cpu", f), 64)
		t += v
	}
	return t
}

func row(what string, v float64, unit string, n int) {
	fmt.Printf("| %s | %.1f %s | %d |\n", what, v, unit, n)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func flush(ctx context.Context, r *counts.Recorder) { must(r.Flush(ctx)) }

func (m *meter) memory() {
	ctx, rdb := m.ctx, m.rdb
	const n = 200000

	rdb.FlushAll(ctx)
	base := m.used()
	a := counts.NewRecorder(rdb, "wsnode-aaaaaaaa", counts.RecorderOptions{})
	for i := range n {
		a.Add(app, fmt.Sprintf("private-user-%07d", i), 1)
	}
	flush(ctx, a)
	m1 := m.used()
	row("memory: occupied channel, its sockets on 1 node (global entry + node field)", float64(m1-base)/n, "B", n)
	b := counts.NewRecorder(rdb, "wsnode-bbbbbbbb", counts.RecorderOptions{})
	for i := range n {
		b.Add(app, fmt.Sprintf("private-user-%07d", i), 1)
	}
	flush(ctx, b)
	row("memory: the same channel on one more node (its field)", float64(m.used()-m1)/n, "B", n)

	rdb.FlushAll(ctx)
	base = m.used()
	c := counts.NewRecorder(rdb, "wsnode-cccccccc", counts.RecorderOptions{})
	const rooms, per = 10000, 20
	for r := range rooms {
		ch := fmt.Sprintf("presence-room-%05d", r)
		for u := range per {
			c.Add(app, ch, 1)
			c.AddMember(app, ch, fmt.Sprintf("%07d", r*per+u), info, 1)
		}
	}
	flush(ctx, c)
	row("memory: presence room of 20 members on 1 node (channel, 2 hashes, 20 members)", float64(m.used()-base)/rooms, "B", rooms)

	rdb.FlushAll(ctx)
	base = m.settled()
	var clients []*redis.Conn
	for range 1000 {
		cl := redis.NewClient(&redis.Options{Addr: m.addr}).Conn()
		must(cl.Ping(ctx).Err())
		clients = append(clients, cl)
	}
	row("memory: client connection just after use", float64(m.used()-base)/1000, "B", 1000)
	perClient := float64(m.settled()-base) / 1000
	row("memory: idle client connection (buffers shrunk)", perClient, "B", 1000)
	for _, cl := range clients {
		cl.Close()
	}

	// One subscriber on many topics: a node's private channels.
	const many = 100000
	base = m.settled()
	ps := m.pubsub(redis.NewClient(&redis.Options{Addr: m.addr}))
	for i := 0; i < many; i += 1000 {
		topics := make([]string, 0, 1000)
		for j := i; j < i+1000; j++ {
			topics = append(topics, keyspace.Space{}.App(app)+fmt.Sprintf("ev:private-user-%07d", j))
		}
		if m.cluster {
			must(ps.SSubscribe(ctx, topics...))
		} else {
			must(ps.Subscribe(ctx, topics...))
		}
	}
	for range many {
		_, err := ps.Receive(ctx)
		must(err)
	}
	row("memory: "+m.subCmd()+" of a topic, its first subscriber", (float64(m.settled()-base)-perClient)/many, "B", many)
	ps.Close()

	// Many subscribers on the same topics: a shared channel on many nodes.
	topics := make([]string, 1000)
	for i := range topics {
		topics[i] = keyspace.Space{}.App(app) + fmt.Sprintf("ev:page-%07d", i)
	}
	var subs []*redis.PubSub
	subscribe := func() {
		ps := m.pubsub(redis.NewClient(&redis.Options{Addr: m.addr}), topics...)
		for range topics {
			_, err := ps.Receive(ctx)
			must(err)
		}
		subs = append(subs, ps)
	}
	subscribe()
	s1 := m.settled()
	for range 99 {
		subscribe()
	}
	row("memory: one more subscriber on a subscribed topic", (float64(m.settled()-s1)-99*perClient)/float64(99*len(topics)), "B", 99*len(topics))
	for _, ps := range subs {
		ps.Close()
	}

	rdb.FlushAll(ctx)
	base = m.used()
	p := rdb.Pipeline()
	offset := 0 // each entry carries its byte offset "o", as eventlog.Log.Append writes it
	for i := range n {
		ev := fmt.Sprintf(`{"channel":"presence-room-%05d","name":"member_added","user_id":"%07d"}`, i%10000, i)
		t := strconv.FormatInt(time.Now().UnixMilli(), 10)
		p.XAdd(ctx, &redis.XAddArgs{Stream: eventlog.Key(keyspace.Space{}, app), Values: []any{"t", t, "ev", ev, "o", offset}})
		offset += len(t) + len(ev)
		if i%1000 == 999 {
			_, err := p.Exec(ctx)
			must(err)
		}
	}
	row("memory: webhook event log entry (member_added)", float64(m.used()-base)/n, "B", n)
}

func (m *meter) subCmd() string {
	if m.cluster {
		return "SSUBSCRIBE"
	}
	return "SUBSCRIBE"
}

func (m *meter) pubsub(c *redis.Client, topics ...string) *redis.PubSub {
	if m.cluster {
		return c.SSubscribe(m.ctx, topics...)
	}
	return c.Subscribe(m.ctx, topics...)
}

// cost measures Redis CPU per operation: f does n of them.
func (m *meter) cost(what string, n int, idle float64, f func()) {
	c0, t0 := m.cpuSec(), time.Now()
	f()
	used := m.cpuSec() - c0 - idle*time.Since(t0).Seconds()
	row("cpu: "+what, used/float64(n)*1e6, "µs", n)
}

func (m *meter) cpu() {
	ctx, rdb := m.ctx, m.rdb
	rdb.FlushAll(ctx)
	const n = 200000
	r := counts.NewRecorder(rdb, "wsnode-dddddddd", counts.RecorderOptions{})
	for i := range n {
		r.Add(app, fmt.Sprintf("private-user-%07d", i), 1)
	}
	flush(ctx, r)
	c0 := m.cpuSec()
	time.Sleep(2 * time.Second)
	idle := (m.cpuSec() - c0) / 2

	// Each round changes every channel once, so nothing nets out; the
	// recorder sends 512 changes per script call, pipelined.
	churn := func(prefix string) func() {
		return func() {
			for round := range 10 {
				d := int64(1 - 2*(round%2))
				for i := range n {
					r.Add(app, fmt.Sprintf("%s-%07d", prefix, i), d)
				}
				flush(ctx, r)
			}
		}
	}
	m.cost("count change of an occupied channel (+1/-1)", 10*n, idle, churn("private-user"))
	m.cost("count change that occupies or vacates a channel (0->1, 1->0)", 10*n, idle, churn("public-topic"))
	m.cost("presence join or leave (member field + the channel's count)", 10*20000, idle, func() {
		for round := range 10 {
			d := int64(1 - 2*(round%2))
			for i := range 20000 {
				ch := fmt.Sprintf("presence-room-%05d", i/20)
				r.Add(app, ch, d)
				var ui json.RawMessage
				if d > 0 {
					ui = info
				}
				r.AddMember(app, ch, fmt.Sprintf("%07d", i), ui, d)
			}
			flush(ctx, r)
		}
	})

	h := counts.NewRecorder(rdb, "wsnode-eeeeeeee", counts.RecorderOptions{})
	for a := range 100 {
		h.Add(fmt.Sprintf("app-%04d", a), "x", 1)
	}
	flush(ctx, h)
	m.cost("heartbeat of one app by one node (100 apps a pipeline)", 100*200, idle, func() {
		for range 200 {
			must(h.Heartbeat(ctx))
		}
	})

	for u := range 20 {
		r.Add(app, "presence-big", 1)
		r.AddMember(app, "presence-big", fmt.Sprintf("u%d", u), info, 1)
	}
	flush(ctx, r)
	st := counts.NewStore(rdb, keyspace.Space{})
	m.cost("member list read of a room of 20 (each presence subscribe)", 20000, idle, func() {
		for range 20000 {
			_, err := st.Members(ctx, app, "presence-big")
			must(err)
		}
	})

	pub := "PUBLISH"
	if m.cluster {
		pub = "SPUBLISH"
	}
	topic := keyspace.Space{}.App(app) + "ev:shared-topic"
	payload := strings.Repeat("x", 200)
	for _, k := range []int{1, 100} {
		var got atomic.Int64
		var wg sync.WaitGroup
		var subs []*redis.PubSub
		for range k {
			ps := m.pubsub(redis.NewClient(&redis.Options{Addr: m.addr}), topic)
			_, err := ps.Receive(ctx)
			must(err)
			subs = append(subs, ps)
			wg.Go(func() {
				for {
					if _, err := ps.ReceiveMessage(ctx); err != nil {
						return
					}
					got.Add(1)
				}
			})
		}
		const events = 20000
		m.cost(fmt.Sprintf("%s of a 200-byte event, per delivery (%d subscribers)", pub, k), events*k, idle, func() {
			p := rdb.Pipeline()
			for i := range events {
				p.Do(ctx, pub, topic, payload)
				if i%200 == 199 {
					_, err := p.Exec(ctx)
					must(err)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for got.Load() < int64(events*k) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		})
		for _, ps := range subs {
			ps.Close()
		}
		wg.Wait()
	}

	ps := m.pubsub(redis.NewClient(&redis.Options{Addr: m.addr}))
	defer ps.Close()
	m.cost(m.subCmd()+" or its undo of one topic (1000 a command)", 2*100000, idle, func() {
		for i := 0; i < 100000; i += 1000 {
			topics := make([]string, 0, 1000)
			for j := i; j < i+1000; j++ {
				topics = append(topics, keyspace.Space{}.App(app)+fmt.Sprintf("ev:private-user-%07d", j))
			}
			if m.cluster {
				must(ps.SSubscribe(ctx, topics...))
				must(ps.SUnsubscribe(ctx, topics...))
			} else {
				must(ps.Subscribe(ctx, topics...))
				must(ps.Unsubscribe(ctx, topics...))
			}
		}
		time.Sleep(time.Second) // the replies, read by go-redis
	})
}
