package fanout

import (
	"context"
	"fmt"
	"time"

	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/history"
	"github.com/redis/go-redis/v9"
)

// PublishBatch publishes msgs, each on its own channel of app, in one round
// trip: one pipeline to Redis (on Redis Cluster to the one master of the
// app's slot, since every topic of an app shares it). Before queueing the
// publish of msgs[i] it calls also(p, i), if not nil, so the caller can queue
// commands on the same pipeline, e.g. reads of the app's counts, which share
// the slot too, or the write of a cache channel's last event, which must be
// in Redis before any node can receive the event. Those commands' results
// are the caller's to check; redis.Nil and other per-command errors do not
// fail the batch.
//
// PublishBatch returns an error if any publish failed; the messages may then
// have been delivered or not, but none is ever sent twice: a pipeline holding
// a publish is never retried by go-redis, and PublishBatch itself resends the
// whole pipeline only when its connection could not even be dialled. also
// is then called again for the new pipeline.
func (b *Bus) PublishBatch(ctx context.Context, app string, msgs []Message, also func(p redis.Pipeliner, i int)) error {
	for _, m := range msgs {
		if app == "" || m.Channel == "" || m.Event == "" {
			return fmt.Errorf("publish %q on channel %q of app %q: %w", m.Event, m.Channel, app, errInvalid)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	payloads := make([][]byte, len(msgs))
	for i := range msgs {
		payloads[i] = encode(&msgs[i])
	}
	start := time.Now()
	var err error
	for attempt := 1; ; attempt++ {
		err = b.publishPipeline(ctx, app, msgs, payloads, also)
		if err == nil || attempt == publishAttempts || !neverSent(err) ||
			!clock.Sleep(ctx, time.Duration(attempt)*10*time.Millisecond) {
			break
		}
	}
	b.m.publishDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		b.m.publishErrors.Add(float64(len(msgs)))
		return err
	}
	b.m.published.Add(float64(len(msgs)))
	return nil
}

func (b *Bus) publishPipeline(ctx context.Context, app string, msgs []Message, payloads [][]byte, also func(redis.Pipeliner, int)) error {
	p := b.rdb.Pipeline()
	pubs := make([]redis.Cmder, len(msgs))
	for i := range msgs {
		if also != nil {
			also(p, i)
		}
		pubs[i] = b.queued(ctx, false, app, &msgs[i], payloads[i])
		// Queueing on a pipeline only appends; it cannot fail.
		_ = p.Process(ctx, pubs[i])
	}
	// Exec's error is the first failed command's, which may be one of the
	// caller's reads (redis.Nil for a missing member): judge the publishes
	// by their own results.
	_, _ = p.Exec(ctx)
	b.evalUnknown(ctx, app, msgs, payloads, pubs)
	for i, c := range pubs {
		err := c.Err()
		if h, ok := c.(history.Publish); ok && err == nil {
			_, err = b.hist.Published(ctx, app, h)
		}
		if err != nil {
			return fmt.Errorf("publish %q on channel %q of app %q: %w", msgs[i].Event, msgs[i].Channel, app, err)
		}
	}
	return nil
}

// queued is msgs[i]'s publish for a pipeline (see publishOne).
func (b *Bus) queued(ctx context.Context, eval bool, app string, m *Message, payload []byte) redis.Cmder {
	topic := b.topic(app, m.Channel)
	if m.Keep.Events > 0 {
		return b.recordCmd(ctx, eval, app, topic, m, payload)
	}
	return b.publishCmd(ctx, topic, payload)
}

// evalUnknown sends again by EVAL, in order and in one more round trip,
// the history publishes that answered NOSCRIPT (Redis lost its script
// cache: a restart, a failover), which proves they never ran. Only the
// first batch after that pays the extra round trip.
func (b *Bus) evalUnknown(ctx context.Context, app string, msgs []Message, payloads [][]byte, pubs []redis.Cmder) {
	var again redis.Pipeliner
	for i, c := range pubs {
		if !history.NoScript(c.Err()) {
			continue
		}
		if again == nil {
			again = b.rdb.Pipeline()
		}
		pubs[i] = b.queued(ctx, true, app, &msgs[i], payloads[i])
		_ = again.Process(ctx, pubs[i])
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
}
