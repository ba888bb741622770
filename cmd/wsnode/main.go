// Command wsnode is a headcount WebSocket node: it serves Pusher protocol v7
// on /app/{key} and keeps this node's subscription counts in Redis.
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
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/metrics"
	"github.com/headcount/headcount/pkg/wsnode"
)

func main() { os.Exit(run(os.Args[1:], os.Getenv, os.Stderr)) }

// run is main without the exit: 0 after a clean drain, 1 on failure, 2 on
// bad configuration.
func run(args []string, env config.Env, stderr io.Writer) int {
	cfg, err := config.ParseWSNode(args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "wsnode: invalid configuration:\n%v\n", err)
		return 2
	}
	log := logging.New("wsnode", cfg.LogLevel, cfg.LogFormat, stderr)
	redis.SetLogger(logging.Redis(log))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second signal kills at once

	app, err := wsnode.New(wsnode.Options{Config: cfg, Logger: log, Registry: metrics.NewRegistry()})
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
