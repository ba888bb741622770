package counts

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// walk pages through app with prefix and returns every name in order,
// failing on a duplicate.
func walk(t testing.TB, l *Listings, app, prefix string, limit int, between func(page int)) []ChannelCount {
	t.Helper()
	var out []ChannelCount
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		pg, _, err := l.Page(context.Background(), app, prefix, cursor, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(pg.Channels), limit)
		for _, c := range pg.Channels {
			require.False(t, seen[c.Name], "duplicate %s on page %d", c.Name, page)
			seen[c.Name] = true
			if len(out) > 0 {
				require.Less(t, out[len(out)-1].Name, c.Name, "order")
			}
			out = append(out, c)
		}
		if pg.Next == "" {
			return out
		}
		cursor = pg.Next
		if between != nil {
			between(page)
		}
	}
}

func TestPaging100k(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("100,000 channels in -short")
	}
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		const n = 100000
		want := make(map[string]int64, n)
		for i := range n {
			want[fmt.Sprintf("ch-%06d", i)] = int64(i%7 + 1)
		}
		start := time.Now()
		seedChannels(t, rdb, "n1", "big", want)
		t.Logf("seeded %d channels in %v", n, time.Since(start))
		l := NewListings(rdb, ListingOptions{})

		start = time.Now()
		got := walk(t, l, "big", "", 1000, nil)
		t.Logf("walked %d channels in pages of 1000 in %v", len(got), time.Since(start))
		require.Len(t, got, n)
		for _, c := range got {
			require.Equal(t, want[c.Name], c.Count, c.Name)
		}
		// A prefix walk reads only its own range.
		sub := walk(t, l, "big", "ch-05", 777, nil)
		require.Len(t, sub, 10000)
		require.Equal(t, "ch-050000", sub[0].Name)
		require.Equal(t, "ch-059999", sub[len(sub)-1].Name)
		none := walk(t, l, "big", "zz", 10, nil)
		require.Empty(t, none)
	})
}

// TestPagingWhileCountsChange vacates and occupies channels between pages:
// channels occupied throughout are listed exactly once, in order; a channel
// vacated before its page is skipped; one occupied after the walk began is
// not listed.
func TestPagingWhileCountsChange(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		seed := map[string]int64{}
		for i := range 1000 {
			seed[fmt.Sprintf("c%04d", i)] = 3
		}
		r := seedChannels(t, rdb, "n1", "app", seed)
		l := NewListings(rdb, ListingOptions{})
		vacated := map[string]bool{}
		got := walk(t, l, "app", "", 100, func(page int) {
			// Ahead of the cursor: vacate one, occupy a new one, and move
			// counts (reordering the live set, not the walk).
			if (page+2)*100 >= 1000 {
				return
			}
			v := fmt.Sprintf("c%04d", (page+2)*100+50)
			r.Add("app", v, -3)
			vacated[v] = true
			r.Add("app", fmt.Sprintf("c%04d-new", (page+2)*100), 1)
			r.Add("app", fmt.Sprintf("c%04d", (page+2)*100+1), 40)
			require.NoError(t, r.Flush(ctx))
		})
		names := map[string]bool{}
		for _, c := range got {
			names[c.Name] = true
		}
		for ch := range seed {
			require.Equal(t, !vacated[ch], names[ch], ch)
		}
		require.Equal(t, len(seed)-len(vacated), len(got))
		require.Len(t, vacated, 8)
	})
}

func TestPagingErrors(t *testing.T) {
	t.Parallel()
	rdb := newSingle(t)
	ctx := context.Background()
	l := NewListings(rdb, ListingOptions{SnapshotIdleTTL: time.Minute})
	seedChannels(t, rdb, "n1", "app", map[string]int64{"a": 1, "b": 1, "c": 1})

	for _, c := range []string{"!!", "YWJj", encodeCursor("short", "a"), encodeCursor("0123456789abcdeZ", "a")} {
		_, _, err := l.Page(ctx, "app", "", c, 10)
		require.ErrorIs(t, err, ErrBadCursor, c)
		require.False(t, ValidCursor(c))
	}
	pg, _, err := l.Page(ctx, "app", "", "", 2)
	require.NoError(t, err)
	require.Equal(t, []ChannelCount{{"a", 1}, {"b", 1}}, pg.Channels)
	require.True(t, ValidCursor(pg.Next))
	// Another app has no such snapshot.
	_, _, err = l.Page(ctx, "other", "", pg.Next, 2)
	require.ErrorIs(t, err, ErrCursorExpired)
	// Snapshots expire.
	id, _, err := decodeCursor(pg.Next)
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, testKeys.snapshotKey("app", id)).Err())
	_, _, err = l.Page(ctx, "app", "", pg.Next, 2)
	require.ErrorIs(t, err, ErrCursorExpired)
	// An app without channels is one empty page.
	pg, _, err = l.Page(ctx, "empty", "", "", 2)
	require.NoError(t, err)
	require.Equal(t, Page{}, pg)
}

func TestLexRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ prefix, last, min, max string }{
		{"", "", "-", "+"},
		{"ab", "", "[ab", "(ac"},
		{"ab", "abc", "(abc", "(ac"},
		{"ab", "aa", "[ab", "(ac"}, // a cursor before the prefix: start at the prefix
		{"a\xff", "", "[a\xff", "(b"},
		{"\xff", "", "[\xff", "+"},
	} {
		lo, hi := lexRange(tc.prefix, tc.last)
		require.Equal(t, tc.min, lo, "%q %q", tc.prefix, tc.last)
		require.Equal(t, tc.max, hi, "%q %q", tc.prefix, tc.last)
	}
}

// TestWalksStartedTogetherShareOneCopy starts walks at once on several
// clients while the first copy is still going (two names per command):
// one caller copies, the others wait for its snapshot.
func TestWalksStartedTogetherShareOneCopy(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		seed := map[string]int64{}
		for i := range 2000 {
			seed[fmt.Sprintf("c%04d", i)] = 1
		}
		seedChannels(t, rdb, "n1", "app", seed)
		ids := make(chan string, 8)
		var wg sync.WaitGroup
		for range cap(ids) {
			l := NewListings(rdb, ListingOptions{ScanCount: 2})
			wg.Go(func() {
				pg, _, err := l.Page(ctx, "app", "", "", 10)
				require.NoError(t, err)
				id, _, err := decodeCursor(pg.Next)
				require.NoError(t, err)
				ids <- id
			})
		}
		wg.Wait()
		close(ids)
		var got []string
		for id := range ids {
			got = append(got, id)
		}
		require.Len(t, slices.Compact(slices.Sorted(slices.Values(got))), 1, "snapshots: %v", got)
	})
}
