package logging

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Formats are the accepted values of --log-format.
var Formats = []string{"text", "json"}

// ParseLevel returns the hclog level for a --log-level value, or an error
// listing the accepted ones.
func ParseLevel(s string) (hclog.Level, error) {
	l := hclog.LevelFromString(strings.ToLower(strings.TrimSpace(s)))
	if l == hclog.NoLevel {
		return l, fmt.Errorf("unknown log level %q (want trace, debug, info, warn or error)", s)
	}
	return l, nil
}

// New returns a root logger named name ("" for none) writing to out. level and
// format must have been validated (config does that before anything runs).
func New(name, level, format string, out io.Writer) hclog.Logger {
	l, err := ParseLevel(level)
	if err != nil {
		l = hclog.Info
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      l,
		Output:     out,
		JSONFormat: format == "json",
		TimeFormat: "2006-01-02T15:04:05.000Z0700",
	})
	if format == "json" {
		return durations{log}
	}
	return log // the text format prints a duration as "3s" already
}

// durations is a logger whose time.Duration values are written as Go
// writes them ("3s", "250ms"): hclog's JSON format writes a duration as
// its nanoseconds (3000000000), which nobody reads right at a glance.
type durations struct{ hclog.Logger }

// withDurations returns args with each time.Duration value (every second
// element) replaced by its string; args itself is left alone.
func withDurations(args []any) []any {
	var out []any
	for i := 1; i < len(args); i += 2 {
		d, ok := args[i].(time.Duration)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = d.String()
	}
	if out == nil {
		return args
	}
	return out
}

func (d durations) Log(level hclog.Level, msg string, args ...any) {
	d.Logger.Log(level, msg, withDurations(args)...)
}
func (d durations) Trace(msg string, args ...any) { d.Logger.Trace(msg, withDurations(args)...) }
func (d durations) Debug(msg string, args ...any) { d.Logger.Debug(msg, withDurations(args)...) }
func (d durations) Info(msg string, args ...any)  { d.Logger.Info(msg, withDurations(args)...) }
func (d durations) Warn(msg string, args ...any)  { d.Logger.Warn(msg, withDurations(args)...) }
func (d durations) Error(msg string, args ...any) { d.Logger.Error(msg, withDurations(args)...) }

func (d durations) With(args ...any) hclog.Logger {
	return durations{d.Logger.With(withDurations(args)...)}
}
func (d durations) Named(name string) hclog.Logger      { return durations{d.Logger.Named(name)} }
func (d durations) ResetNamed(name string) hclog.Logger { return durations{d.Logger.ResetNamed(name)} }

// TestLogger returns a logger that writes through t.Log, so output appears
// only for failing tests (or with -v) and is attributed to the test.
func TestLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   t.Name(),
		Level:  hclog.Debug,
		Output: testWriter{t},
	})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Redis adapts l for redis.SetLogger, so go-redis's own messages (dial
// retries, pool trouble) arrive through hclog at debug level, named
// "redis". Outages are logged once, with context, by the packages that
// meet them; go-redis would repeat them at every retry.
func Redis(l hclog.Logger) RedisPrintf { return RedisPrintf{l.Named("redis")} }

// RedisPrintf implements go-redis's logging interface.
type RedisPrintf struct{ l hclog.Logger }

// Printf logs one go-redis message.
func (r RedisPrintf) Printf(_ context.Context, format string, v ...any) {
	r.l.Debug(fmt.Sprintf(format, v...))
}

// RepeatEvery is how often a Limiter lets a repeated warning through.
const RepeatEvery = 10 * time.Second

// Limiter lets a repeated warning through at most once per RepeatEvery and
// counts the occurrences in between, so a flood of one problem (refused
// connections, failed accepts, undecodable messages) logs a line every ten
// seconds saying how many there were. The zero value is ready; it is safe
// for concurrent use.
type Limiter struct {
	mu   sync.Mutex
	last time.Time
	n    int
}

// Allow counts one occurrence at now and reports whether to log it, with
// the occurrences since the last line logged, this one included.
func (l *Limiter) Allow(now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if !l.last.IsZero() && now.Sub(l.last) < RepeatEvery {
		return 0, false
	}
	n := l.n
	l.last, l.n = now, 0
	return n, true
}
