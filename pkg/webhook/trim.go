package webhook

import (
	"cmp"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/eventlog"
)

// trim trims the app's log every TrimEvery, if this target is the one that
// trims it, sweeps a slice of its index, and reports the log's size and the
// events its budget refused.
func (s *session) trim(ctx context.Context) {
	t := s.t
	if !t.trims || time.Since(s.lastTrim) < t.d.opts.TrimEvery {
		return
	}
	s.lastTrim = time.Now()
	t.trim(ctx)
	log := eventlog.For(t.d.opts.Keyspace, t.app.ID)
	if next, err := log.Sweep(ctx, t.d.rdb, s.sweep, sweepSlice); err == nil {
		s.sweep = next
	} else {
		t.log.Debug("cannot sweep the webhook log's index", "error", err)
	}
	// Room may be back after drops with no event to follow them: tell
	// them now.
	if _, err := log.Tell(ctx, t.d.rdb, LogBudget(t.app)); err != nil {
		t.log.Debug("cannot log the events_dropped notice", "error", err)
	}
	st, err := log.Stats(ctx, t.d.rdb)
	if err != nil {
		return
	}
	t.d.m.logBytes.WithLabelValues(t.app.ID).Set(float64(st.Bytes))
	t.d.m.logDropped.set(t.app.ID, st.Dropped)
	if st.Untold > 0 && time.Since(s.lastFullLog) >= logFullEvery {
		s.lastFullLog = time.Now()
		t.log.Error("the app's webhook event log is full: events are being dropped (its webhooks are failing or far behind); receivers that ask for events_dropped are told how many once there is room",
			"dropped", st.Untold, "since", st.UntoldSince, "log_bytes", st.Bytes, "budget_bytes", LogBudget(t.app))
	}
}

// sweepSlice is how many index slots a trim's sweep looks at.
const sweepSlice = 500

// trim removes the log entries every webhook of the app has finished: those
// before the lowest of each group's oldest pending entry or, with nothing
// pending, its last delivered one. Until every group exists nothing is
// trimmed (a webhook whose replica never started still wants them all).
// Trimming is what frees the log's byte budget (eventlog.Log.Append): the
// entries carry their own byte offsets, so no counter needs updating.
func (t *target) trim(ctx context.Context) {
	groups, err := t.d.rdb.XInfoGroups(ctx, t.key).Result()
	if err != nil {
		return
	}
	have := map[string]redis.XInfoGroup{}
	for _, g := range groups {
		have[g.Name] = g
	}
	lowest := ""
	for _, w := range t.app.Webhooks {
		g, ok := have[groupName(w.URL)]
		if !ok {
			return
		}
		floor := g.LastDeliveredID
		if g.Pending > 0 {
			p, err := t.d.rdb.XPending(ctx, t.key, g.Name).Result()
			if err != nil {
				return
			}
			floor = p.Lower
		}
		if lowest == "" || cmpID(floor, lowest) < 0 {
			lowest = floor
		}
	}
	if lowest != "" && lowest != "0-0" {
		if err := t.d.rdb.XTrimMinID(ctx, t.key, lowest).Err(); err != nil {
			t.log.Debug("cannot trim the webhook log", "error", err)
		}
	}
}

// cmpID compares stream ids "ms-seq" as cmp.Compare does.
func cmpID(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ai, _ := strconv.ParseUint(am, 10, 64)
	bi, _ := strconv.ParseUint(bm, 10, 64)
	if ai != bi {
		return cmp.Compare(ai, bi)
	}
	asi, _ := strconv.ParseUint(as, 10, 64)
	bsi, _ := strconv.ParseUint(bs, 10, 64)
	return cmp.Compare(asi, bsi)
}
