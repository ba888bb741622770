package cleaner

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/redisx"
)

// auditLoop audits one app every audit interval, the apps taking turns,
// and exports what it finds as headcount_cleaner_count_drift. It reports
// what the audit script saw, which is atomic, so drift it exports is never
// a write caught half-way.
//
// It never repairs. Drift means some atomic unit broke invariant 1, which
// is a bug to find, and a repair erases the evidence (the metric would
// flicker and drop back to 0). A repair also trusts the contributions:
// when they are the wrong side (a corrupt field) it makes things worse,
// and it announces no member_added/member_removed for presence members it
// adds or removes. So repair is an operator's decision: `cleaner audit
// --repair`, after looking.
func (a *App) auditLoop(ctx context.Context) {
	wait := time.NewTimer(a.auditEvery)
	defer wait.Stop()
	last := ""               // the app audited last: the next one in order goes next
	seen := map[string]int{} // differences at each app's last audit, to log changes once
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		start := time.Now()
		apps, err := a.store.Apps(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				a.m.audits.WithLabelValues("error").Inc()
				a.log.Debug("audit: cannot list apps", "error", err)
			}
		case len(apps) > 0:
			slices.Sort(apps)
			i, _ := slices.BinarySearch(apps, last)
			if i < len(apps) && apps[i] == last {
				i++
			}
			last = apps[i%len(apps)]
			a.auditOne(ctx, last, seen)
		}
		// The audit script holds the app's shard while it runs: waiting
		// auditDutyFactor times as long as it took keeps a huge app's audit
		// to a small share of Redis's time, whatever the interval.
		wait.Reset(max(a.auditEvery, auditDutyFactor*time.Since(start)))
	}
}

// auditDutyFactor bounds the continuous audit to about 1/auditDutyFactor
// of the time of the Redis shard it reads.
const auditDutyFactor = 50

func (a *App) auditOne(ctx context.Context, app string, seen map[string]int) {
	d, err := a.store.Audit(ctx, app)
	if err != nil {
		if ctx.Err() == nil {
			a.m.audits.WithLabelValues("error").Inc()
			// Scans log Redis outages; the audit only notes its own failure.
			a.log.Debug("audit failed", "app", app, "error", err)
		}
		return
	}
	a.m.drift.WithLabelValues(app).Set(float64(len(d.Diffs)))
	prev, known := seen[app]
	seen[app] = len(d.Diffs)
	if !d.Found() {
		a.m.audits.WithLabelValues("clean").Inc()
		if known && prev > 0 {
			a.log.Info("audit: counts consistent again", "app", app)
		}
		return
	}
	a.m.audits.WithLabelValues("drift").Inc()
	if prev != len(d.Diffs) {
		first := d.Diffs[0]
		a.log.Warn("audit: counts differ from the nodes' contributions; run `cleaner audit` to list them, `cleaner audit --repair` to fix them",
			"app", app, "differences", len(d.Diffs), "first_kind", first.Kind, "first_key", diffKey(first),
			"first_want", first.Want, "first_have", haveString(first))
	}
}

// Audit checks the counts of every app that has had counts in cfg's Redis
// and writes every difference to out, one line each (app, kind, key, want,
// have). With repair it then repairs each app's differences (atomically per
// entry, keeping concurrent updates; see counts.Store.Repair) and audits the
// app again to show the result. drift reports whether any difference was
// found, repaired or not. It is safe to run beside live wsnodes and cleaners.
func Audit(ctx context.Context, cfg config.Cleaner, out io.Writer, repair bool) (drift bool, err error) {
	rdb, err := redisx.NewClient(cfg.Common)
	if err != nil {
		return false, err
	}
	defer rdb.Close()
	store := counts.NewStore(rdb, keyspace.New(cfg.RedisPrefix))
	store.SliceSize = cfg.SliceSize
	apps, err := store.Apps(ctx)
	if err != nil {
		return false, fmt.Errorf("audit: %w", err)
	}
	slices.Sort(apps)

	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	var notes []string
	header, unrepaired := false, 0
	for _, app := range apps {
		d, err := store.Audit(ctx, app)
		if err != nil {
			_ = tw.Flush()
			return drift, err
		}
		if !d.Found() {
			continue
		}
		drift = true
		if !header {
			fmt.Fprintln(tw, "APP\tKIND\tKEY\tWANT\tHAVE")
			header = true
		}
		for _, diff := range d.Diffs {
			want := strconv.FormatInt(diff.Want, 10)
			if diff.Kind == counts.KindContribution {
				want = "positive"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", app, diff.Kind, diffKey(diff), want, haveString(diff))
		}
		note := fmt.Sprintf("app %s: %d differences (%d registered nodes)", app, len(d.Diffs), d.Nodes)
		if repair {
			more, ok := repairApp(ctx, store, d)
			note += more
			if !ok {
				unrepaired++
			}
		}
		notes = append(notes, note)
	}
	if err := tw.Flush(); err != nil {
		return drift, fmt.Errorf("write audit: %w", err)
	}
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
	switch {
	case !drift:
		fmt.Fprintf(out, "consistent: %d apps audited, every global count equals the sum of the registered nodes' contributions\n", len(apps))
	case repair && unrepaired > 0:
		fmt.Fprintf(out, "drift found in %d of %d apps; %d of them still differ after the repair (see above)\n", len(notes), len(apps), unrepaired)
	case repair:
		fmt.Fprintf(out, "drift found in %d of %d apps, and repaired\n", len(notes), len(apps))
	default:
		fmt.Fprintf(out, "drift found in %d of %d apps; `cleaner audit --repair` fixes it\n", len(notes), len(apps))
	}
	return drift, nil
}

// repairApp repairs one app's drift and audits it again, describing both
// and reporting whether the app is consistent now. A failure is described
// rather than returned, so the other apps are still audited and repaired.
func repairApp(ctx context.Context, store *counts.Store, d counts.Drift) (string, bool) {
	n, err := store.Repair(ctx, d.App, d)
	if err != nil {
		return fmt.Sprintf("; repair failed after %d entries: %v", n, err), false
	}
	s := fmt.Sprintf("; repaired %d entries", n)
	after, err := store.Audit(ctx, d.App)
	switch {
	case err != nil:
		return s + fmt.Sprintf("; audit after repair failed: %v", err), false
	case after.Found():
		// Contribution fields belong to their nodes (a node republishing
		// rewrites them); anything else left is new drift.
		return s + fmt.Sprintf("; %d differences remain (contribution fields are left to their nodes)", len(after.Diffs)), false
	}
	return s + "; consistent now", true
}

// diffKey renders what a difference is about: the channel, the channel
// and quoted user of a presence member, "-" for connections, and the node
// and field of a contribution.
func diffKey(d counts.Difference) string {
	switch d.Kind {
	case counts.KindChannel:
		return d.Channel
	case counts.KindMember:
		return d.Channel + " " + strconv.Quote(d.User)
	case counts.KindContribution:
		return "node " + strconv.Quote(d.Node) + " field " + strconv.Quote(d.Field)
	}
	return "-"
}

// haveString renders a stored value; "absent" when there is none, so a
// stored 0 (drift: it shows up in listings) reads differently from none.
func haveString(d counts.Difference) string {
	if !d.Present {
		return "absent"
	}
	return strconv.FormatInt(d.Have, 10)
}
