// Command cleaner removes the counts of dead wsnodes. Run two or more: they
// hold a lease in Redis and only the holder works.
//
//	cleaner [flags]                  run as an active/passive cleaner
//	cleaner audit [--repair] [flags] check every app's counts once; exit 0
//	                                 when consistent, 1 when drift was found
//	                                 (repaired or not) or the audit failed,
//	                                 2 on a bad configuration
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/cleaner"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/lifecycle"
	"github.com/headcount/headcount/pkg/logging"
)

func main() { os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)) }

func run(args []string, env config.Env, stdout, stderr io.Writer) int {
	cfg, rest, err := config.ParseCleaner(args, env, stderr)
	if err == nil && len(rest) > 0 {
		if rest[0] == "audit" {
			return audit(cfg, rest[1:], stdout, stderr)
		}
		err = fmt.Errorf("unknown command %q (cleaner --help lists the commands: audit)", rest[0])
	}
	return lifecycle.Main("cleaner", stdout, stderr, err, cfg.Common, func(log hclog.Logger, reg *prometheus.Registry) (lifecycle.Service, error) {
		return cleaner.New(cleaner.Options{Config: cfg, Logger: log, Registry: reg})
	})
}

// audit runs `cleaner audit [--repair]`, the cleaner's flags before or
// after it: the report goes to stdout, problems to stderr.
func audit(cfg config.Cleaner, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cleaner audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repair := fs.Bool("repair", false, "set each differing global entry to the sum of the registered nodes' contributions (atomically per entry)")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return lifecycle.ExitOK
	case err == nil && fs.NArg() > 0:
		err = fmt.Errorf("audit: unexpected arguments %q", strings.Join(fs.Args(), " "))
	}
	if err != nil {
		fmt.Fprintf(stderr, "cleaner: invalid configuration:\n%v\n", err)
		return lifecycle.ExitConfig
	}
	// go-redis logs (dial retries) go through the configured logger, as
	// in every binary, so --log-format json stays JSON.
	cfg.RedisLogger = logging.New("cleaner", cfg.LogLevel, cfg.LogFormat, stderr)
	redis.SetLogger(logging.Redis(cfg.RedisLogger))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	drift, err := cleaner.Audit(ctx, cfg, stdout, *repair)
	if err != nil {
		fmt.Fprintf(stderr, "cleaner: audit failed: %v\n", err)
		return lifecycle.ExitFailed
	}
	if drift {
		return lifecycle.ExitFailed
	}
	return lifecycle.ExitOK
}
