package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestJSONDurations: durations read as "3s" in JSON, in a line's own
// arguments, in With's and through Named, which also builds the
// <binary>.<component> name; other values are left as they are.
func TestJSONDurations(t *testing.T) {
	var buf bytes.Buffer
	log := New("cleaner", "debug", "json", &buf).Named("lease").With("ttl", 3*time.Second)
	args := []any{"dead_after", 3 * time.Second, "scan_interval", 500 * time.Millisecond, "fields", 5, "name", "x"}
	log.Info("started", args...)
	log.Named("inner").ResetNamed("cleaner.audit").Warn("slow", "took", 1500*time.Millisecond)
	require.Equal(t, 3*time.Second, args[1], "the caller's arguments are not changed")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	var first, second map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	require.Equal(t, "cleaner.lease", first["@module"])
	require.Equal(t, "3s", first["dead_after"])
	require.Equal(t, "500ms", first["scan_interval"])
	require.Equal(t, "3s", first["ttl"])
	require.Equal(t, 5.0, first["fields"])
	require.Equal(t, "x", first["name"])
	require.Equal(t, "cleaner.audit", second["@module"])
	require.Equal(t, "1.5s", second["took"])
	require.Equal(t, "3s", second["ttl"])
}

func TestTextDurations(t *testing.T) {
	var buf bytes.Buffer
	New("wsnode", "info", "text", &buf).Named("counts").Info("started", "dead_after", 3*time.Second)
	require.Contains(t, buf.String(), "[INFO]  wsnode.counts: started: dead_after=3s")
}

func TestLimiter(t *testing.T) {
	var l Limiter
	now := time.Now()
	n, ok := l.Allow(now)
	require.True(t, ok)
	require.Equal(t, 1, n)
	for range 4 {
		_, ok = l.Allow(now.Add(time.Second))
		require.False(t, ok)
	}
	n, ok = l.Allow(now.Add(RepeatEvery))
	require.True(t, ok)
	require.Equal(t, 5, n, "the occurrences since the last line, this one included")
}
