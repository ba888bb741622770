// Command httpapi serves the signed Pusher HTTP API of a headcount cluster
// from the counts in Redis. Exit codes: 0 clean stop, 1 runtime failure,
// 2 bad configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/httpapi"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/metrics"
)

func main() { os.Exit(run(os.Args[1:], os.Getenv, os.Stderr)) }

func run(args []string, env config.Env, stderr io.Writer) int {
	cfg, err := config.ParseHTTPAPI(args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "httpapi: invalid configuration:\n%v\n", err)
		return 2
	}
	log := logging.New("httpapi", cfg.LogLevel, cfg.LogFormat, stderr)
	redis.SetLogger(logging.Redis(log))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second signal kills at once

	app, err := httpapi.New(httpapi.Options{Config: cfg, Logger: log, Registry: metrics.NewRegistry()})
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
