package lifecycle

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/metrics"
	"github.com/headcount/headcount/pkg/version"
)

// Exit codes of every binary.
const (
	ExitOK     = 0
	ExitFailed = 1
	ExitConfig = 2
)

// Main is the body of every binary's main once its configuration is
// parsed: a bad configuration (parseErr) exits 2 with every problem, -h
// exits 0, --version prints the version to stdout and exits 0; otherwise
// it builds the logger and registry, starts the app and runs it until
// SIGINT or SIGTERM (Run releases what start took). A second signal kills
// the process at once.
func Main(name string, stdout, stderr io.Writer, parseErr error, c config.Common,
	start func(log hclog.Logger, reg *prometheus.Registry) (Service, error)) int {
	if code, done := Parsed(name, stdout, stderr, parseErr); done {
		return code
	}
	// The app names its logger after itself (wsnode) and its parts add
	// theirs (wsnode.counts): the root given to it is unnamed.
	root := logging.New("", c.LogLevel, c.LogFormat, stderr)
	log := root.Named(name)
	redis.SetLogger(logging.Redis(log))
	log.Info("starting", "redis", c.RedisTarget()) // which Redis, never its password
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // restore default handling: a second signal kills

	app, err := start(root, metrics.NewRegistry())
	if err != nil {
		log.Error("cannot start", "error", err)
		return ExitFailed
	}
	if err := app.Run(ctx); err != nil {
		log.Error("stopped with an error", "error", err)
		return ExitFailed
	}
	return ExitOK
}

// Parsed handles what parsing a configuration may end a run with: -h
// (exit 0), --version (printed to stdout, exit 0) and a bad configuration
// (every problem to stderr, exit 2). done is false when the run goes on.
func Parsed(name string, stdout, stderr io.Writer, parseErr error) (code int, done bool) {
	switch {
	case parseErr == nil:
		return 0, false
	case errors.Is(parseErr, flag.ErrHelp):
		return ExitOK, true
	case errors.Is(parseErr, config.ErrVersion):
		fmt.Fprintln(stdout, version.Line(name))
		return ExitOK, true
	}
	fmt.Fprintf(stderr, "%s: invalid configuration:\n%v\n", name, parseErr)
	return ExitConfig, true
}
