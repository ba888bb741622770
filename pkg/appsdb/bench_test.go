package appsdb_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/apps"
)

// BenchmarkLoad10k measures a reload of a 10,000-app soketi table, each
// app with one webhook: the time and allocations of one Load, the
// database server's CPU time per Load (db-cpu-ms/op, from /proc: 10 ms
// ticks, so run enough iterations) and, when a row changed (so the rows
// are decoded), the heap the resulting Registry holds (registry-MB).
// "unchanged" is the common case, a Load that finds the rows it read last
// time and returns apps.ErrUnchanged; "changed" updates one row before
// each Load, outside the timing and the CPU count.
func BenchmarkLoad10k(b *testing.B) {
	const n = 10000
	for _, d := range dialects {
		b.Run(d.name, func(b *testing.B) {
			db := &db{dialect: d, srv: d.start(b)}
			table := db.soketiTable(b)
			db.exec(b, "DELETE FROM "+table)
			const batch = 1000
			for lo := 0; lo < n; lo += batch {
				var vals []string
				for i := lo; i < lo+batch; i++ {
					vals = append(vals, fmt.Sprintf(`('app-%d', 'key-%d', 'secret-%d-0123456789abcdef', 1000, 1, 0, -1, 100, -1,
						'[{"url":"https://hooks.example.com/app-%d","event_types":["channel_occupied","channel_vacated"]}]', NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0)`, i, i, i, i))
				}
				db.exec(b, fmt.Sprintf(`INSERT INTO %s (id, %s, secret, max_connections, %s, enable_client_messages, max_backend_events_per_sec,
					max_client_events_per_sec, max_read_req_per_sec, webhooks, max_presence_members_per_channel, max_presence_member_size_in_kb,
					max_channel_name_length, max_event_channels_at_once, max_event_name_length, max_event_payload_in_kb, max_event_batch_size,
					enable_user_authentication) VALUES %s`, table, d.quote("key"), d.quote("enabled"), strings.Join(vals, ",")))
			}
			for _, changed := range []bool{false, true} {
				name := "unchanged"
				if changed {
					name = "changed"
				}
				b.Run(name, func(b *testing.B) { benchLoad(b, db, table, changed) })
			}
		})
	}
}

// bumps numbers the changes benchLoad makes.
var bumps atomic.Int64

func benchLoad(b *testing.B, db *db, table string, changed bool) {
	s := db.source(b, table)
	ctx := context.Background()
	r := load(b, s) // connect, and warm the server's cache
	require.Len(b, r.All(), 10000)
	r = nil
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if changed {
			b.StopTimer()
			i := bumps.Add(1) // never a value a row held before
			db.exec(b, fmt.Sprintf("UPDATE %s SET max_connections = %d WHERE id = 'app-%d'", table, 2000+i, i%10000))
			b.StartTimer()
		}
		c0, err := db.srv.CPU()
		require.NoError(b, err)
		next, err := s.Load(ctx)
		switch {
		case changed && err == nil:
			r = next
		case !changed && errors.Is(err, apps.ErrUnchanged):
		default:
			b.Fatal(err)
		}
		c1, err := db.srv.CPU()
		require.NoError(b, err)
		cpu += c1 - c0
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N), "db-cpu-ms/op")
	if changed {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		runtime.KeepAlive(r)
		b.ReportMetric(float64(int64(ms.HeapAlloc)-int64(before))/(1<<20), "registry-MB")
	}
}
