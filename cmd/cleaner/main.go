// Command cleaner removes the counts of dead wsnodes. Run two or more: they
// hold a lease in Redis and only the holder works.
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

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/cleaner"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/metrics"
)

func main() { os.Exit(run(os.Args[1:], os.Getenv, os.Stderr)) }

func run(args []string, env config.Env, stderr io.Writer) int {
	cfg, rest, err := config.ParseCleaner(args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unknown subcommand %q", strings.Join(rest, " "))
	}
	if err != nil {
		fmt.Fprintf(stderr, "cleaner: invalid configuration:\n%v\n", err)
		return 2
	}
	log := logging.New("cleaner", cfg.LogLevel, cfg.LogFormat, stderr)
	redis.SetLogger(logging.Redis(log))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second signal kills at once
	app, err := cleaner.New(cleaner.Options{Config: cfg, Logger: log, Registry: metrics.NewRegistry()})
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	if err := app.Run(ctx); err != nil {
		log.Error("stopped with an error", "error", err)
		return 1
	}
	return 0
}
