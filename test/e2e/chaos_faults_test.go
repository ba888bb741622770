package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// pickUp returns a random slot that is up, or nil.
func (c *chaos) pickUp() *chaosSlot {
	var up []*chaosSlot
	c.mu.Lock()
	for _, s := range c.slots {
		if s.state == slotUp {
			up = append(up, s)
		}
	}
	c.mu.Unlock()
	if len(up) == 0 {
		return nil
	}
	return up[c.rng.IntN(len(up))]
}

func (c *chaos) setState(s *chaosSlot, st slotState) {
	c.mu.Lock()
	s.state = st
	c.lastChange = time.Now()
	c.recordLocked(s)
	c.mu.Unlock()
}

// recordLocked notes slot s's state now, for livenessReport.
func (c *chaos) recordLocked(s *chaosSlot) {
	if c.history == nil {
		c.history = map[string][]stateChange{}
	}
	c.history[s.name] = append(c.history[s.name], stateChange{time.Now(), s.state})
}

// livenessReport logs how many nodes the cleaners reaped because their
// connection closed, split by whether the node's process was dead then
// (SIGKILLed) or alive (paused, partitioned, or up: a live node's
// liveness connection dropped while its heartbeat was past the grace).
func (c *chaos) livenessReport() {
	c.mu.Lock()
	defer c.mu.Unlock()
	dead, alive := 0, 0
	var wrong []string
	for _, path := range c.cleanerLogs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, "reaped dead node") || !strings.Contains(line, "reason=connection_closed") {
				continue
			}
			ts, _, _ := strings.Cut(line, " ")
			at, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts)
			_, rest, _ := strings.Cut(line, " node=")
			id, _, _ := strings.Cut(rest, " ")
			if err != nil || id == "" {
				continue
			}
			state := slotUp
			for _, ch := range c.history[id] {
				if ch.at.After(at) {
					break
				}
				state = ch.state
			}
			if state == slotDown {
				dead++
			} else {
				alive++
				wrong = append(wrong, fmt.Sprintf("%s at %s (state %d)", id, at.Format("15:04:05.000"), state))
			}
		}
	}
	c.t.Logf("chaos: liveness reaps (reason=connection_closed): %d of SIGKILLed nodes, %d of live nodes %v", dead, alive, wrong)
}

// nodeFlags are the Redis flags of slot s's wsnode: its own proxy when it
// has one.
func (c *chaos) nodeFlags(s *chaosSlot) []string {
	if s.proxy != nil {
		return []string{"--redis", s.proxy.URL()}
	}
	return c.common
}

// restart starts a new wsnode in slot s, with the same node id, and marks
// it up; churn reads s.n under c.mu.
func (c *chaos) restart(s *chaosSlot) {
	n := startWSNode(c.t, s.name, c.nodeFlags(s)...)
	waitReady(c.t, n.p, n.admin)
	c.mu.Lock()
	s.n, s.state = n, slotUp
	c.lastChange = time.Now()
	c.recordLocked(s)
	c.mu.Unlock()
}

// killNode: SIGKILL a wsnode; its counts go within dead-after + scan
// interval; a replacement with the same node id starts after.
func (c *chaos) killNode() {
	s := c.pickUp()
	if s == nil {
		return
	}
	c.gate.Lock()
	c.setState(s, slotDown)
	s.n.p.kill(c.t)
	c.gate.Unlock()
	killed := time.Now()
	c.check("wsnode SIGKILL", killed, deadAfter+scanInterval+heartbeat+chaosSlack, nil)
	c.restart(s)
}

// pauseNode: SIGSTOP a wsnode until it is reaped, then SIGCONT: it must
// notice and republish within one heartbeat.
func (c *chaos) pauseNode() {
	s := c.pickUp()
	if s == nil {
		return
	}
	c.gate.Lock()
	c.setState(s, slotPaused)
	s.n.p.signal(syscall.SIGSTOP)
	c.gate.Unlock()
	stopped := time.Now()
	// While paused and reaped, the global holds the other nodes only.
	c.check("wsnode SIGSTOP: reaped", stopped, deadAfter+scanInterval+heartbeat+chaosSlack, s)
	c.gate.Lock()
	s.n.p.signal(syscall.SIGCONT)
	c.setState(s, slotUp)
	c.gate.Unlock()
	c.check("wsnode SIGCONT: republished", time.Now(), heartbeat+chaosSlack, nil)
}

// restartRedis: Redis restarted empty; every node republishes within two
// heartbeats.
func (c *chaos) restartRedis() {
	c.gate.Lock()
	c.srv.Restart(c.t)
	c.gate.Unlock()
	c.check("redis restart empty", time.Now(), 2*heartbeat+chaosSlack, nil)
}

func (c *chaos) activeCleaner(within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		for i, cl := range c.cleaners {
			if metric(cl.admin, "headcount_cleaner_active") == 1 {
				return i
			}
		}
		if time.Now().After(deadline) {
			return -1
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// cleanerFault: SIGKILL or SIGSTOP the active cleaner, with a wsnode
// SIGKILLed at the same moment so only a cleaner can fix the counts: the
// passive cleaner takes over within one lease TTL and reaps.
func (c *chaos) cleanerFault() {
	i := c.activeCleaner(5 * time.Second)
	if i < 0 {
		c.violation("cleaner", "no active cleaner")
		return
	}
	cl, other := c.cleaners[i], c.cleaners[1-i]
	stop := c.rng.IntN(2) == 0
	fault := "cleaner SIGKILL + wsnode SIGKILL"
	if stop {
		fault = "cleaner SIGSTOP + wsnode SIGKILL"
	}
	s := c.pickUp()
	c.gate.Lock()
	if stop {
		cl.p.signal(syscall.SIGSTOP)
	} else {
		cl.p.kill(c.t)
	}
	if s != nil {
		c.setState(s, slotDown)
		s.n.p.kill(c.t)
	}
	c.gate.Unlock()
	at := time.Now()
	// The lease runs out at most one TTL after the dead holder's last
	// renewal, and the passive one tries to take it every third of a TTL.
	takeover := leaseTTL + leaseTTL/3 + chaosSlack
	deadline := at.Add(takeover)
	for metric(other.admin, "headcount_cleaner_active") != 1 {
		if time.Now().After(deadline) {
			c.violation("cleaner takeover", fmt.Sprintf("passive cleaner not active within %v", takeover))
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if metric(other.admin, "headcount_cleaner_active") == 1 {
		c.record("cleaner takeover", time.Since(at))
	}
	c.check(fault, at, leaseTTL+leaseTTL/3+deadAfter+scanInterval+heartbeat+chaosSlack, nil)
	if stop {
		cl.p.signal(syscall.SIGCONT)
		resumed := time.Now()
		deadline := resumed.Add(scanInterval + chaosSlack)
		for metric(cl.admin, "headcount_cleaner_active") != 0 || metric(other.admin, "headcount_cleaner_active") != 1 {
			if time.Now().After(deadline) {
				c.violation(fault, "resumed cleaner did not turn passive (or the other lost the lease)")
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
	} else {
		n := startCleaner(c.t, cl.p.name, c.common...)
		waitReady(c.t, n.p, n.admin)
		c.cleaners[i] = n
		c.mu.Lock()
		c.cleanerLogs = append(c.cleanerLogs, n.p.log)
		c.mu.Unlock()
	}
	if s != nil {
		c.restart(s)
	}
}

// partitionNode cuts one wsnode off Redis (its proxy drops every byte,
// closing nothing) past dead-after. The cleaner reaps it meanwhile, and it
// keeps serving its own sockets; once the link heals it must notice and
// republish within one heartbeat, as after SIGCONT. Its goroutines must
// not have grown beyond one per socket while cut off.
func (c *chaos) partitionNode() {
	s := c.pickUp()
	if s == nil || s.proxy == nil {
		return
	}
	before := c.goroutinesBeyondSockets(s)
	c.gate.Lock()
	c.setState(s, slotPartitioned)
	s.proxy.Partition()
	c.gate.Unlock()
	cut := time.Now()
	// While cut off and reaped, the global holds the other nodes only.
	c.check("wsnode partition: reaped", cut, deadAfter+scanInterval+heartbeat+chaosSlack, s)

	// Reaped and still cut off, it serves its sockets: a new one subscribes.
	c.gate.RLock()
	served := c.open(s, s.n.addr, c.rng, false)
	c.gate.RUnlock()
	if !served {
		c.violation("wsnode partition: serves sockets", "a new socket could not subscribe on the partitioned node")
	}
	// Stay cut off a while longer than the Redis client's timeouts, so it
	// redials and times out again and again, as in a long outage.
	time.Sleep(time.Until(cut.Add(chaosPartitionFor)))
	if after := c.goroutinesBeyondSockets(s); before >= 0 && after > before+chaosGoroutineGrowth {
		c.violation("wsnode partition: goroutines", fmt.Sprintf("%d goroutines beyond one per socket after %v cut off, %d before",
			after, time.Since(cut).Round(time.Millisecond), before))
	} else {
		c.t.Logf("chaos: %s cut off for %v: %d goroutines beyond one per socket, %d before", s.name, time.Since(cut).Round(time.Millisecond), after, before)
	}

	c.gate.Lock()
	s.proxy.Heal()
	c.setState(s, slotUp)
	c.gate.Unlock()
	c.check("wsnode partition healed: republished", time.Now(), heartbeat+chaosSlack, nil)
}

// chaosPartitionFor is how long a partition lasts: twice dead-after.
const chaosPartitionFor = 2 * deadAfter

// chaosGoroutineGrowth is how many more goroutines, beyond one per socket,
// a node cut off from Redis may have: a few reconnecting clients, not one
// per write or per socket.
const chaosGoroutineGrowth = 50

// goroutinesBeyondSockets is a wsnode's goroutines less its open sockets
// (each has one), or -1 when its metrics cannot be read.
func (c *chaos) goroutinesBeyondSockets(s *chaosSlot) int {
	g, n := metric(s.n.admin, "go_goroutines"), metric(s.n.admin, "headcount_wsnode_connections_open")
	if g < 0 || n < 0 {
		return -1
	}
	return int(g - n)
}

// leaselessCleaners swaps the cleaner pair for two started with
// --lease-ttl 0 (no lease: both always active) and SIGKILLs two wsnodes at
// once, so both cleaners find and reap the same dead nodes at the same
// time. No count may be subtracted twice: the counts end exact (no
// negative, audit clean) and the two cleaners' reaps add up to the nodes
// killed. The usual pair then comes back.
func (c *chaos) leaselessCleaners() {
	const fault = "2 cleaners without lease + 2 wsnode SIGKILL"
	c.replaceCleaners(0)
	for _, cl := range c.cleaners {
		if !c.poll(5*time.Second, func() bool { return metric(cl.admin, "headcount_cleaner_active") == 1 }) {
			c.violation(fault, cl.p.name+" without lease is not active")
		}
	}
	var killed []*chaosSlot
	c.gate.Lock()
	for range 2 {
		if s := c.pickUp(); s != nil {
			c.setState(s, slotDown)
			s.n.p.kill(c.t)
			killed = append(killed, s)
		}
	}
	c.gate.Unlock()
	c.check(fault, time.Now(), deadAfter+scanInterval+heartbeat+chaosSlack, nil)
	// Counted right after each reap commits: poll, then it must be exact.
	reaps := func() (total int, each []int) {
		for _, cl := range c.cleaners {
			n := int(metricSum(cl.admin, "headcount_cleaner_reaped_nodes_total"))
			total, each = total+n, append(each, n)
		}
		return total, each
	}
	c.poll(2*time.Second, func() bool { n, _ := reaps(); return n >= len(killed) })
	if n, each := reaps(); n != len(killed) {
		var names, logged []string
		for _, s := range killed {
			names = append(names, s.name)
		}
		for _, cl := range c.cleaners {
			b, _ := os.ReadFile(cl.p.log)
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "reaped dead node") {
					logged = append(logged, cl.p.name+": "+line)
				}
			}
		}
		c.violation(fault, fmt.Sprintf("the two cleaners reaped %v times, %v died; they logged:\n%s", each, names, strings.Join(logged, "\n")))
	} else {
		c.t.Logf("chaos: %d nodes died; reaped by the lease-less cleaners %v times", len(killed), each)
	}
	c.replaceCleaners(leaseTTL)
	if c.activeCleaner(leaseTTL+chaosSlack) < 0 {
		c.violation(fault, "no cleaner took the lease after the lease-less pair left")
	}
	for _, s := range killed {
		c.restart(s)
	}
}

// replaceCleaners SIGTERMs both cleaners (the active one releases its
// lease) and starts two with leaseTTL (0: no lease) in their place.
func (c *chaos) replaceCleaners(ttl time.Duration) {
	for _, cl := range c.cleaners {
		cl.p.signal(syscall.SIGTERM)
	}
	for i, cl := range c.cleaners {
		if code := cl.p.wait(c.t, 10*time.Second); code != 0 {
			c.violation("cleaner SIGTERM", fmt.Sprintf("%s exited %d", cl.p.name, code))
		}
		n := node{admin: freeAddr(c.t)}
		n.p = start(c.t, cl.p.name, "cleaner", append(slices.Clone(c.common), "--admin-addr", n.admin,
			"--dead-after", deadAfter.String(), "--scan-interval", scanInterval.String(), "--lease-ttl", ttl.String())...)
		waitReady(c.t, n.p, n.admin)
		c.cleaners[i] = n
		c.mu.Lock()
		c.cleanerLogs = append(c.cleanerLogs, n.p.log)
		c.mu.Unlock()
	}
}

// poll reports whether cond became true within d, checking every 25 ms.
func (c *chaos) poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(25 * time.Millisecond)
	}
	return true
}
