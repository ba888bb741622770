package load

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// Limits that keep a run bounded.
const (
	MaxSockets  = 200_000
	MaxDuration = time.Hour
)

// Config is one load scenario.
type Config struct {
	WS                 []string // wsnode host:port, sockets spread round-robin
	API                string   // httpapi host:port; empty: no counted/publish measures
	AppID, Key, Secret string
	Sockets            int           // sockets to hold
	ConnectRate        int           // new sockets per second during the ramp; 0: as fast as Concurrency allows
	Concurrency        int           // dials in flight (default 256)
	Hold               time.Duration // how long to hold (churning, publishing) after the ramp
	HotChannels        int           // default 1
	ColdChannels       int           // default 400 (with at most 1,000 load channels, counted-all is measured)
	HotShare           float64       // share of sockets on hot channels (default 0.1)
	PresenceShare      float64       // share of sockets on presence channels (default 0)
	ChurnRate          float64       // sockets closed and reopened per second while holding
	PublishRate        float64       // events per second to the hot channels while holding
	SourceIPs          int           // spread over this many 127.0.0.x source addresses (default 1: the kernel's choice)
	ProbeEvery         int           // every Nth socket measures subscribe-to-counted (0: default 100; negative: off)
	Progress           io.Writer     // one line per second; nil: none
	// Admin lists admin host:ports of server processes (wsnodes, httpapi,
	// cleaners) whose process_cpu_seconds_total is read before and after
	// the ramp, to report their CPU cost per accepted socket.
	Admin []string
	// PIDs lists local server processes (any server, not only headcount's)
	// whose CPU time is read from /proc before and after the ramp and
	// added to RampCPUSeconds and RampCPUPerSocketMs as Admin's are.
	PIDs []int
}

func (c *Config) defaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 256
	}
	if c.HotChannels <= 0 {
		c.HotChannels = 1
	}
	if c.ColdChannels <= 0 {
		c.ColdChannels = 400
	}
	if c.HotShare == 0 {
		c.HotShare = 0.1
	}
	if c.ProbeEvery == 0 {
		c.ProbeEvery = 100
	}
	if c.SourceIPs <= 0 {
		c.SourceIPs = 1
	}
}

// Validate checks the bounds and that every target is on loopback.
func (c *Config) Validate() error {
	var errs []error
	if len(c.WS) == 0 {
		errs = append(errs, errors.New("no wsnode address"))
	}
	for _, a := range append(append(slices.Clone(c.WS), c.API), c.Admin...) {
		if a == "" {
			continue
		}
		if err := loopback(a); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Sockets < 1 || c.Sockets > MaxSockets {
		errs = append(errs, fmt.Errorf("sockets must be 1..%d, not %d", MaxSockets, c.Sockets))
	}
	if c.Hold < 0 || c.Hold > MaxDuration {
		errs = append(errs, fmt.Errorf("hold must be 0..%v, not %v", MaxDuration, c.Hold))
	}
	if c.HotShare < 0 || c.HotShare > 1 || c.PresenceShare < 0 || c.PresenceShare > 1 || c.HotShare+c.PresenceShare > 1 {
		errs = append(errs, errors.New("hot and presence shares must be within 0..1 and sum to at most 1"))
	}
	if c.SourceIPs > 250*250 {
		errs = append(errs, errors.New("at most 62,500 source addresses"))
	}
	if c.AppID == "" || c.Key == "" || c.Secret == "" {
		errs = append(errs, errors.New("app id, key and secret are required"))
	}
	return errors.Join(errs...)
}

func loopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", hostport, err)
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return fmt.Errorf("%q: %w", hostport, err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() || ip.To4() == nil {
			return fmt.Errorf("%q resolves to %v: the load tool targets 127.0.0.0/8 only", hostport, ip)
		}
	}
	return nil
}
