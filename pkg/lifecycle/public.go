package lifecycle

import (
	"net"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/headcount/headcount/pkg/apps"
)

// Loopback reports whether addr, a bound host:port, accepts connections
// from this host only. An unspecified address (":8080", "0.0.0.0:8080",
// "[::]:8080") or any other interface's is not loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// WarnPublicSecrets logs a warning when a server bound at addr (the
// address setting names, e.g. "--addr") is reachable from other hosts and
// serves apps whose secret ships with headcount (see
// apps.Registry.WithPublicSecret): anyone who can reach it can then sign
// API requests and channel subscriptions. On loopback it says nothing:
// `make run` and the tests use the default app on purpose.
func WarnPublicSecrets(log hclog.Logger, reg *apps.Registry, setting, addr string) {
	ids := reg.WithPublicSecret()
	if len(ids) == 0 || Loopback(addr) {
		return
	}
	log.Warn("INSECURE: apps use a secret published with headcount while "+setting+" is reachable from other hosts; "+
		"anyone can sign API requests and private and presence subscriptions for them. "+
		"Set HEADCOUNT_APP_KEY and HEADCOUNT_APP_SECRET, or give --apps-file with secrets of your own",
		"app_ids", strings.Join(ids, ","), "setting", setting, "addr", addr)
}

// WarnIgnoredAppFields logs each field of the apps file that headcount
// ignores (apps.Registry.Warnings), so that a soketi setting that does
// nothing here is said once at every start of every binary.
func WarnIgnoredAppFields(log hclog.Logger, reg *apps.Registry) {
	for _, w := range reg.Warnings() {
		log.Warn("apps file: " + w)
	}
}
