// Command cleaner removes the counts of dead wsnodes. Run two or more: they
// hold a lease in Redis and only the holder works.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headcount/headcount/pkg/cleaner"
	"github.com/headcount/headcount/pkg/config"
	hcrun "github.com/headcount/headcount/pkg/run"
)

func main() { os.Exit(run(os.Args[1:], os.Getenv, os.Stderr)) }

func run(args []string, env config.Env, stderr io.Writer) int {
	cfg, rest, err := config.ParseCleaner(args, env, stderr)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unknown subcommand %q", strings.Join(rest, " "))
	}
	return hcrun.Main("cleaner", stderr, err, cfg.Common, func(log hclog.Logger, reg *prometheus.Registry) (hcrun.Runner, error) {
		return cleaner.New(cleaner.Options{Config: cfg, Logger: log, Registry: reg})
	})
}
