package counts

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// LogEvent is one event for AppendEvents.
type LogEvent struct {
	// JSON is the event as its webhook will carry it.
	JSON string
	// Bounded events are refused when they would take the log past its
	// byte budget. Events that record a change already made elsewhere must
	// not be bounded: refusing them would lose their webhook silently.
	Bounded bool
}

// AppendEvents appends events, in order, to app's event log (EventLogKey),
// in one atomic script on the log's shard, and returns how many bounded
// events it refused and the bytes the log holds afterwards.
//
// A log's bytes are the sizes of its entries' "t" and "ev" fields (the
// timestamp and the JSON), as the entries themselves record them (see
// scripts/eventlog.lua), so trimming the log lowers them with no
// bookkeeping. A bounded event is refused if appending it would take the
// log past budget bytes; budget <= 0 means no byte bound. The check and the
// append are one atomic unit, so the budget holds however many nodes
// append at once: after a bounded append the log holds at most budget
// bytes. Unbounded events (and the count scripts' occupancy events, which
// are never refused) are appended even past the budget and count toward
// it. Whatever the bytes, the log is capped at about a million entries.
func AppendEvents(ctx context.Context, rdb redis.UniversalClient, app string, budget int64, events ...LogEvent) (refused int, bytes int64, err error) {
	if len(events) == 0 {
		return 0, 0, nil
	}
	args := make([]any, 0, 1+2*len(events))
	args = append(args, max(budget, 0))
	for _, ev := range events {
		bounded := "0"
		if ev.Bounded {
			bounded = "1"
		}
		args = append(args, bounded, ev.JSON)
	}
	res, err := appendScript.Run(ctx, rdb, []string{EventLogKey(app)}, args...).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("append to the event log of app %s: %w", app, err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("append to the event log of app %s: unexpected reply %v", app, res)
	}
	return int(res[0]), res[1], nil
}

// EventLogBytes returns the bytes app's event log holds, as AppendEvents
// counts them: 0 for an empty or missing log.
func EventLogBytes(ctx context.Context, rdb redis.UniversalClient, app string) (int64, error) {
	n, err := logBytesScript.Run(ctx, rdb, []string{EventLogKey(app)}).Int64()
	if err != nil {
		return 0, fmt.Errorf("read the size of the event log of app %s: %w", app, err)
	}
	return n, nil
}
