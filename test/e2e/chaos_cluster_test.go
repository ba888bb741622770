package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// The app's slot moves in batches this small, one per pace tick, so the
	// nodes keep writing while some of its keys are on each master.
	chaosMigrateBatch = 2
	chaosMigratePace  = 50 * time.Millisecond
)

// migrateAppSlot moves the app's hash slot to another master under load,
// the way redis-cli --cluster reshard does: IMPORTING on the target,
// MIGRATING on the source, MIGRATE the slot's keys in small batches while
// the churn goes on (clients follow ASK and TRYAGAIN meanwhile), then
// SETSLOT NODE on the target, the source and the third master (MOVED from
// then on). Nothing may be lost: counts exact and audit clean right after.
func (c *chaos) migrateAppSlot() {
	const fault = "app slot migration"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	masters := c.masters
	// Every key of the app carries {app} as its hash tag, so this key
	// (not one of the counts keys) has the app's slot.
	slot64, err := masters[0].ClusterKeySlot(ctx, "x{"+chaosApp+"}").Result()
	if err != nil {
		c.fatal(fault, "CLUSTER KEYSLOT: "+err.Error())
	}
	slot := int(slot64)
	ids := make([]string, len(masters))
	src := -1
	for i, m := range masters {
		if ids[i], err = m.ClusterMyID(ctx).Result(); err != nil {
			c.fatal(fault, "CLUSTER MYID: "+err.Error())
		}
	}
	ranges, err := masters[0].ClusterSlots(ctx).Result() //nolint:staticcheck // CLUSTER SHARDS needs Redis 7; SLOTS answers on every version the tests may meet
	if err != nil {
		c.fatal(fault, "CLUSTER SLOTS: "+err.Error())
	}
	for _, r := range ranges {
		if r.Start <= slot && slot <= r.End {
			for i, id := range ids {
				if id == r.Nodes[0].ID {
					src = i
				}
			}
		}
	}
	if src < 0 {
		c.fatal(fault, fmt.Sprintf("no master owns slot %d", slot))
	}
	dst := (src + 1 + c.rng.IntN(len(masters)-1)) % len(masters)
	host, port, _ := net.SplitHostPort(c.cluster.Nodes[dst].Addr)

	began := time.Now()
	do := func(m *redis.Client, args ...any) {
		if err := m.Do(ctx, args...).Err(); err != nil {
			c.fatal(fault, fmt.Sprintf("%v: %v", args, err))
		}
	}
	do(masters[dst], "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
	do(masters[src], "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
	pace := time.NewTicker(chaosMigratePace)
	defer pace.Stop()
	moved, batches := 0, 0
	for {
		keys, err := masters[src].ClusterGetKeysInSlot(ctx, slot, chaosMigrateBatch).Result()
		if err != nil {
			c.fatal(fault, "CLUSTER GETKEYSINSLOT: "+err.Error())
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := masters[src].Do(ctx, args...).Err(); err != nil {
			if !strings.Contains(err.Error(), "BUSYKEY") {
				c.fatal(fault, fmt.Sprintf("%v: %v", args, err))
			}
			// A client created the key on the target while the source
			// still had it: two copies, so counts are already split. Record
			// it and finish as redis-cli --cluster fix would (REPLACE keeps
			// the source's copy); the check's repair restores consistency
			// so the run goes on.
			c.violation(fault, fmt.Sprintf("%v: %v (the key was written on the importing master while the migrating one still held it)", keys, err))
			do(masters[src], append([]any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}, args[7:]...)...)
		}
		moved += len(keys)
		batches++
		<-pace.C
	}
	order := []int{dst, src}
	for i := range masters {
		if i != dst && i != src {
			order = append(order, i)
		}
	}
	for _, i := range order {
		do(masters[i], "CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
	}
	done := time.Now()
	c.t.Logf("chaos: slot %d of %s moved from master %d to %d: %d keys in %d batches over %v",
		slot, chaosApp, src, dst, moved, batches, done.Sub(began).Round(time.Millisecond))
	// Writes refused during the move are retried within a heartbeat.
	c.check(fault, done, 2*heartbeat+chaosSlack, nil)
}
