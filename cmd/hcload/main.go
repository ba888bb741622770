// Command hcload is headcount's load generator: it opens Pusher sockets to
// wsnodes on loopback, subscribes and churns them, publishes through the
// HTTP API, prints progress every second and a JSON summary at the end.
// See pkg/load. Exit status: 0 done, 1 run failed, 2 bad flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/headcount/headcount/pkg/load"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hcload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg load.Config
	ws := fs.String("ws", "127.0.0.1:6001,127.0.0.1:6002", "wsnode host:port list (comma-separated; loopback only)")
	fs.StringVar(&cfg.API, "api", "127.0.0.1:8080", "httpapi host:port (empty: no counted/publish measures)")
	fs.StringVar(&cfg.AppID, "app-id", "app-id", "app id")
	fs.StringVar(&cfg.Key, "app-key", "app-key", "app key")
	fs.StringVar(&cfg.Secret, "app-secret", "app-secret", "app secret")
	fs.IntVar(&cfg.Sockets, "sockets", 1000, fmt.Sprintf("sockets to hold (at most %d)", load.MaxSockets))
	fs.IntVar(&cfg.ConnectRate, "connect-rate", 0, "new sockets per second during the ramp (0: as fast as --concurrency allows)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 256, "dials in flight")
	fs.DurationVar(&cfg.Hold, "hold", 10*time.Second, "how long to hold the sockets after the ramp (churning, publishing)")
	fs.IntVar(&cfg.HotChannels, "hot-channels", 1, "hot channels")
	fs.IntVar(&cfg.ColdChannels, "cold-channels", 400, "cold channels (presence channels use as many)")
	fs.Float64Var(&cfg.HotShare, "hot-share", 0.1, "share of sockets on hot channels")
	fs.Float64Var(&cfg.PresenceShare, "presence-share", 0, "share of sockets on presence channels")
	fs.Float64Var(&cfg.ChurnRate, "churn", 0, "sockets closed and reopened per second while holding")
	fs.Float64Var(&cfg.PublishRate, "publish-rate", 0, "events per second to the hot channels while holding")
	fs.IntVar(&cfg.SourceIPs, "source-ips", 1, "spread sockets over this many 127.0.x.y source addresses")
	fs.IntVar(&cfg.ProbeEvery, "probe-every", 100, "every Nth socket measures subscribe-to-counted (0: off)")
	admin := fs.String("admin", "", "admin host:port list of server processes whose CPU per accepted socket to report (comma-separated)")
	out := fs.String("json", "", "also write the summary to this file")
	quiet := fs.Bool("quiet", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg.WS = strings.Split(*ws, ",")
	if cfg.ProbeEvery == 0 {
		cfg.ProbeEvery = -1 // off, as the flag says (the package's 0 means its default)
	}
	if *admin != "" {
		cfg.Admin = strings.Split(*admin, ",")
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "hcload: invalid configuration:\n%v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := load.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "hcload: %v\n", err)
		return 1
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	fmt.Fprintln(stdout, string(b))
	if *out != "" {
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil { //nolint:gosec // G306: a results file for others to read, like any report
			fmt.Fprintf(stderr, "hcload: %v\n", err)
			return 1
		}
	}
	return 0
}
