// Command httpapi serves the signed Pusher HTTP API of a headcount cluster
// from the counts in Redis. Exit codes: 0 clean stop, 1 runtime failure,
// 2 bad configuration.
package main

import (
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/httpapi"
	"github.com/headcount/headcount/pkg/lifecycle"
)

func main() { os.Exit(run(os.Args[1:], os.LookupEnv, os.Stderr)) }

func run(args []string, env config.Env, stderr io.Writer) int {
	return runTo(args, env, os.Stdout, stderr)
}

// runTo is run with stdout given: where --version prints.
func runTo(args []string, env config.Env, stdout, stderr io.Writer) int {
	cfg, err := config.ParseHTTPAPI(args, env, stderr)
	return lifecycle.Main("httpapi", stdout, stderr, err, cfg.Common, func(log hclog.Logger, reg *prometheus.Registry) (lifecycle.Service, error) {
		return httpapi.New(httpapi.Options{Config: cfg, Logger: log, Registry: reg})
	})
}
