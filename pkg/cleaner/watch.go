package cleaner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/counts"
)

// The watch: the active cleaner holds a GET /liveness open on the admin
// port of every node that registered an address. The kernel closes a
// killed process's connections at once, so the watch ends within a
// millisecond of a SIGKILL or an OOM kill. Its end alone judges nobody (a
// path can break while the node lives): the node is reaped only once
// Redis, too, has dropped its liveness subscription. A hung node keeps
// both open and is left to dead-after.
//
// Passive cleaners do not watch: they could not reap what they learn, and
// a node then holds one watch, not one per cleaner. A death between a
// takeover and the new holder's first dial goes by the liveness check.

// Results of a watch's end, as in watch_ends_total.
const (
	watchDead        = "dead"
	watchAlive       = "alive"
	watchUnconfirmed = "unconfirmed"
)

const (
	// watchDialTimeout bounds a dial and the wait for the node's
	// headers, which it sends at once; the watch itself has no timeout.
	watchDialTimeout = 2 * time.Second
	// confirmWindow is how long a node whose watch ended may still hold
	// its liveness subscription before the end is put down to the path:
	// the process's Redis connection closes at the same moment, but Redis
	// may handle that a little after the cleaner reads its end.
	confirmWindow = 500 * time.Millisecond
	// confirmPoll spaces the looks after the second. The first usually
	// races Redis's own handling of the close, which the node's exit
	// anchor sends before the watch's end; the second, at once, follows
	// it: Redis handled the close in the same turn of its loop as the
	// first look or before. Each look is one round trip, and a broken
	// path (the rare case that looks for the whole window) costs at most
	// 500 of them.
	confirmPoll = time.Millisecond
	// watchBackoffMax bounds the wait between attempts to watch one node.
	watchBackoffMax = 5 * time.Second
)

// watch is the state of one watched node, under watcher.mu.
type watch struct {
	addr   string
	node   counts.Candidate // as last listed
	cancel context.CancelFunc
	// reaped: its goroutine reaped and forgot the node, which is watched
	// again only if it is listed with another last-seen.
	reaped bool
}

type watcher struct {
	a      *App
	held   func() bool
	client *http.Client

	mu      sync.Mutex
	watches map[string]*watch
	wg      sync.WaitGroup
}

// watchLoop lists the nodes every liveness interval and keeps one watch
// per node with an address, while this cleaner is active.
func (a *App) watchLoop(ctx context.Context, held func() bool) {
	dialer := &net.Dialer{Timeout: watchDialTimeout}
	transport := &http.Transport{
		Proxy:                 nil, // the nodes' admin ports, never through a proxy
		DialContext:           dialer.DialContext,
		ResponseHeaderTimeout: watchDialTimeout,
		DisableKeepAlives:     true, // a watch's connection is its own
		DisableCompression:    true,
	}
	w := &watcher{a: a, held: held, watches: map[string]*watch{}, client: &http.Client{
		Transport:     transport, // no overall timeout: a watch lasts as long as its node
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	defer transport.CloseIdleConnections()
	defer func() {
		w.mu.Lock()
		for _, wt := range w.watches {
			if wt.cancel != nil {
				wt.cancel()
			}
		}
		w.mu.Unlock()
		w.wg.Wait()
		a.m.watched.Set(0)
	}()
	t := time.NewTicker(a.cfg.LivenessInterval)
	defer t.Stop()
	failing := false
	for {
		nodes, err := a.store.WatchNodes(ctx, livenessBatch)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				a.log.Warn("cannot list the nodes to watch; watches held go on", "error", err)
			}
			failing = true
		default:
			failing = false
			w.reconcile(ctx, nodes)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reconcile starts a watch for each listed node with an address, and stops
// those of nodes no longer listed (or listed elsewhere).
func (w *watcher) reconcile(ctx context.Context, nodes []counts.WatchNode) {
	w.mu.Lock()
	defer w.mu.Unlock()
	listed := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if n.Address == "" {
			continue
		}
		listed[n.Node] = true
		wt := w.watches[n.Node]
		switch {
		case wt == nil:
		case wt.addr != n.Address, wt.reaped && wt.node.Seen != n.Seen:
			if wt.cancel != nil {
				wt.cancel()
			}
		default:
			wt.node = n.Candidate
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		wt = &watch{addr: n.Address, node: n.Candidate, cancel: cancel}
		w.watches[n.Node] = wt
		w.wg.Go(func() { w.run(wctx, wt) })
	}
	for node, wt := range w.watches {
		if !listed[node] {
			if wt.cancel != nil {
				wt.cancel()
			}
			delete(w.watches, node)
		}
	}
}

// run watches one node until ctx ends or it reaps the node.
func (w *watcher) run(ctx context.Context, wt *watch) {
	backoff := time.Duration(0)
	var ended time.Time // when the current run of failed watches began
	for ctx.Err() == nil {
		connected, err := w.hold(ctx, wt.addr)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = 0
			ended = time.Time{}
		}
		if ended.IsZero() {
			ended = time.Now()
		}
		if connected || refused(err) {
			c := w.candidate(wt)
			// The node's apps are read while Redis is asked whether it is
			// dead, so its first reap script follows the confirmation at
			// once: each round trip here waits behind whatever else Redis
			// is serving, and a reap's first script is what reads wait for.
			apps := make(chan appsRead, 1)
			go func() {
				list, err := w.a.store.AppsOf(ctx, c.Node)
				apps <- appsRead{list, err}
			}()
			result := w.confirm(ctx, c)
			read := <-apps // never left running past Stop
			switch result {
			case watchDead:
				if w.reap(ctx, wt, ended, read) {
					return
				}
			case "":
				return // stopping
			}
		}
		backoff = min(max(2*backoff, 20*time.Millisecond), watchBackoffMax)
		if !clock.Sleep(ctx, backoff) {
			return
		}
	}
}

func (w *watcher) candidate(wt *watch) counts.Candidate {
	w.mu.Lock()
	defer w.mu.Unlock()
	return wt.node
}

// hold opens the watch and returns when it ends; connected says the node
// answered 200.
func (w *watcher) hold(ctx context.Context, addr string) (connected bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/liveness", nil)
	if err != nil {
		return false, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET /liveness answered %s", resp.Status)
	}
	w.a.m.watched.Inc()
	defer w.a.m.watched.Dec()
	_, err = io.Copy(io.Discard, resp.Body)
	return true, err
}

// refused reports a dial refused or reset: nothing listens at the address
// any more, as after a process's death on a host that lives. A timeout
// (a host gone, a partition) is the heartbeat's to judge.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// confirm asks Redis whether c's liveness subscription is gone, polling
// for up to confirmWindow while it is still there. It returns watchDead,
// watchAlive or watchUnconfirmed, counted, or "" when ctx ended.
func (w *watcher) confirm(ctx context.Context, c counts.Candidate) string {
	result := func() string {
		if !c.Subscribed {
			// A node that never recorded a subscription is not dead for
			// missing one.
			return watchUnconfirmed
		}
		deadline := time.Now().Add(confirmWindow)
		waited := false
		for look := 1; ; look++ {
			_, dead, trusted, err := w.a.store.Liveness(ctx, w.a.canary, livenessTrustAfter, []string{c.Node})
			switch {
			case ctx.Err() != nil:
				return ""
			case err == nil && !trusted && !waited && !w.a.canary.Since().IsZero():
				// The cleaner's own subscription is younger than
				// livenessTrustAfter (it just started, or the liveness
				// shard came back): look again once it can be trusted,
				// not after the watch's backoff.
				waited = true
				if !clock.Sleep(ctx, time.Until(w.a.canary.Since().Add(livenessTrustAfter))) {
					return ""
				}
				deadline = time.Now().Add(confirmWindow)
				continue
			case err != nil || !trusted:
				return watchUnconfirmed
			case len(dead) == 1:
				return watchDead
			case time.Now().After(deadline):
				return watchAlive
			}
			if look > 1 && !clock.Sleep(ctx, confirmPoll) {
				return ""
			}
		}
	}()
	switch result {
	case "":
	case watchAlive:
		w.a.m.watchEnds.WithLabelValues(result).Inc()
		w.a.log.Info("a watch ended but the node is still subscribed in Redis: the path broke, the node lives; watching again", "node", c.Node)
	default:
		w.a.m.watchEnds.WithLabelValues(result).Inc()
	}
	return result
}

// appsRead is Store.AppsOf's answer.
type appsRead struct {
	apps []string
	err  error
}

// reap reaps a node confirmed dead in every app it is in (apps, read as
// its death was confirmed), sparing it wherever it wrote after its watch
// ended (a node that came back), and reports whether it is done (reaped
// and forgotten).
func (w *watcher) reap(ctx context.Context, wt *watch, ended time.Time, apps appsRead) bool {
	if !w.held() {
		return false
	}
	c := w.candidate(wt)
	err := apps.err
	forgot := false
	if err == nil {
		forgot, err = w.a.reapEverywhere(ctx, w.held, c, apps.apps, reasonWatch, time.Since(ended), ended)
	}
	if err != nil {
		if ctx.Err() == nil {
			w.a.log.Warn("reaping a node whose watch ended failed; retrying", "node", c.Node, "error", err)
		}
		return false
	}
	if !forgot {
		return false // it wrote since it was listed: the next attempt looks again
	}
	w.mu.Lock()
	wt.reaped = true
	w.mu.Unlock()
	return true
}
