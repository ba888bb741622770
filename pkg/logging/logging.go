// Package logging builds the one root hclog.Logger of a binary. The app
// (wsnode, cleaner, httpapi) names it after itself and its packages call
// Named on that with their component's name, so every line says
// <binary>.<component>; nothing else in headcount creates loggers.
// Loggers are safe for concurrent use.
package logging

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

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
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      l,
		Output:     out,
		JSONFormat: format == "json",
		TimeFormat: "2006-01-02T15:04:05.000Z0700",
	})
}

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
