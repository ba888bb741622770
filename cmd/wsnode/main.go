// Command wsnode is a headcount WebSocket node: it serves Pusher protocol v7
// on /app/{key}, keeps this node's subscription, presence and connection
// counts in Redis, and exchanges events with the other nodes through Redis
// pub/sub.
package main

import (
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/lifecycle"
	"github.com/headcount/headcount/pkg/wsnode"
)

func main() { os.Exit(run(os.Args[1:], os.LookupEnv, os.Stderr)) }

// run is main without the exit: 0 after a clean drain, 1 on failure, 2 on
// bad configuration.
func run(args []string, env config.Env, stderr io.Writer) int {
	return runTo(args, env, os.Stdout, stderr)
}

// runTo is run with stdout given: where --version prints.
func runTo(args []string, env config.Env, stdout, stderr io.Writer) int {
	cfg, err := config.ParseWSNode(args, env, stderr)
	return lifecycle.Main("wsnode", stdout, stderr, err, cfg.Common, func(log hclog.Logger, reg *prometheus.Registry) (lifecycle.Service, error) {
		return wsnode.New(wsnode.Options{Config: cfg, Logger: log, Registry: reg})
	})
}
