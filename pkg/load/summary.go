package load

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Percentiles summarizes a set of durations in milliseconds.
type Percentiles struct {
	N                  int     `json:"n"`
	P50, P90, P99, Max float64 `json:"-"`
}

// MarshalJSON names the fields as the report reads them.
func (p Percentiles) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"n": p.N, "p50_ms": p.P50, "p90_ms": p.P90, "p99_ms": p.P99, "max_ms": p.Max})
}

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))]) / float64(time.Millisecond) }
	return Percentiles{N: len(d), P50: at(.5), P90: at(.9), P99: at(.99), Max: at(1)}
}

// Summary is a run's outcome.
type Summary struct {
	Sockets         int     `json:"sockets"`
	Opened          int64   `json:"opened"`
	ConnectErrors   int64   `json:"connect_errors"`
	SubscribeErrors int64   `json:"subscribe_errors"`
	Dropped         int64   `json:"dropped"` // closed by the server or the network while held
	RampSeconds     float64 `json:"ramp_seconds"`
	// AcceptedPerSecond: sockets subscribed per second during the ramp.
	AcceptedPerSecond float64 `json:"accepted_per_second"`
	// CountedAllSeconds: from the first dial until the HTTP API counted
	// every subscription (0 if not within 60 s, no API, or more than 1,000
	// load channels).
	CountedAllSeconds float64     `json:"counted_all_seconds"`
	Connect           Percentiles `json:"connect"`
	Counted           Percentiles `json:"subscribe_to_counted"`
	Delivery          Percentiles `json:"publish_to_delivery"`
	Published         int64       `json:"published"`
	Churned           int64       `json:"churned"`
	// RampCPUSeconds is each Admin process's CPU time during the ramp, and
	// RampCPUPerSocketMs their sum per socket accepted.
	RampCPUSeconds     map[string]float64 `json:"ramp_cpu_seconds,omitempty"`
	RampCPUPerSocketMs float64            `json:"ramp_cpu_per_socket_ms,omitempty"`
	// HoldCPUPerDeliveryUs is the Admin and PIDs processes' CPU time from
	// the start of the hold until its last deliveries were read, per event
	// delivered to a socket in that time: what a delivered frame costs the
	// servers, publishing and churn included.
	HoldCPUPerDeliveryUs float64 `json:"hold_cpu_per_delivery_us,omitempty"`
	// ToolCPUPerSocketMs is this process's own CPU time during the ramp per
	// socket accepted: on a shared machine, what the load cost the servers.
	ToolCPUPerSocketMs float64 `json:"tool_cpu_per_socket_ms,omitempty"`
	// ToolCPUPerDeliveryUs is this process's own CPU time over the same
	// span as HoldCPUPerDeliveryUs, per event delivered: what reading a
	// delivery costs the clients, which share the machine with the servers.
	ToolCPUPerDeliveryUs float64 `json:"tool_cpu_per_delivery_us,omitempty"`
	// ToolCollections is how many times this process's garbage collector
	// ran during the hold: 0 unless its memory grew by holdHeadroom. Each
	// one slows every reader at once, so a delivery figure measured with
	// one includes the tool's own pause.
	ToolCollections uint64 `json:"tool_collections_in_hold"`
}

// progress prints a line a second until stopped.
func (r *run) progress(ctx context.Context) (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r.mu.Lock()
			c, d := percentiles(slices.Clone(r.connect)), percentiles(slices.Clone(r.delivery))
			k := percentiles(slices.Clone(r.counted))
			r.mu.Unlock()
			fmt.Fprintf(r.cfg.Progress, "t=%3.0fs open=%d/%d errors=%d dropped=%d connect p99=%.1fms counted p99=%.1fms published=%d delivered=%d p50=%.1fms p99=%.1fms\n",
				time.Since(start).Seconds(), r.subscribed.Load(), r.cfg.Sockets, r.connErr.Load()+r.subErr.Load(), r.dropped.Load(),
				c.P99, k.P99, r.published.Load(), d.N, d.P50, d.P99)
		}
	})
	return func() { close(done); wg.Wait() }
}
