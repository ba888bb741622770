package lease

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Elector runs an active function only while its lease is held: it tries to
// acquire every TTL/3, renews every TTL/3 while active, and cancels the
// active function's context as soon as a renewal is refused or the lease's
// local validity runs out, waiting for it to return before contending again.
type Elector struct {
	Lease *Lease
	Log   hclog.Logger
	// OnChange, if set, is told each time this contender becomes active or
	// passive (metrics).
	OnChange func(active bool)
}

// Run contends for the lease until ctx ends, running active while it holds
// it, and releases the lease on the way out.
func (e *Elector) Run(ctx context.Context, active func(ctx context.Context)) error {
	l, log := e.Lease, e.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	every := l.TTL() / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	reachable := true // log outages once, not every try
	for {
		ok, err := l.TryAcquire(ctx)
		switch {
		case err != nil && ctx.Err() == nil && reachable:
			log.Warn("cannot reach Redis to contend for the lease; retrying", "error", err)
			reachable = false
		case err == nil && !reachable:
			log.Info("Redis answers again: contending for the lease")
			reachable = true
		}
		if ok {
			e.lead(ctx, active, tick)
		}
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// lead runs active while the lease holds, and returns when it is lost or
// ctx ends.
func (e *Elector) lead(ctx context.Context, active func(context.Context), tick *time.Ticker) {
	l, log := e.Lease, e.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log.Info("acquired the lease: active", "token", l.Token())
	e.changed(true)
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { active(actx) })
	defer func() {
		cancel()
		wg.Wait()
		e.changed(false)
	}()
	expiry := time.NewTimer(l.remaining() - l.TTL()/10)
	defer expiry.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
			defer rcancel()
			cancel()
			wg.Wait()
			if err := l.Release(rctx); err != nil {
				log.Warn("could not release the lease; it expires by itself", "error", err)
			} else {
				log.Info("released the lease")
			}
			return
		case <-expiry.C:
			log.Warn("lease not renewed in time: passive", "ttl", l.TTL())
			return
		case <-tick.C:
			err := l.Renew(ctx)
			switch {
			case errors.Is(err, ErrNotHeld):
				log.Warn("lease taken by another holder (this one missed a renewal): passive")
				return
			case err != nil:
				if ctx.Err() == nil {
					log.Warn("cannot renew the lease; still active until it expires", "error", err)
				}
			default:
				expiry.Reset(l.remaining() - l.TTL()/10)
			}
		}
	}
}

func (e *Elector) changed(active bool) {
	if e.OnChange != nil {
		e.OnChange(active)
	}
}
