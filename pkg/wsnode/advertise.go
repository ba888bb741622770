package wsnode

import (
	"net"
)

// advertise returns the address the cleaners watch this node at:
// --advertise-host, else the admin listener's host if it is a specific IP,
// joined with the admin listener's real port; "" when there is none, which
// it logs once, saying what to set.
func (a *App) advertise() string {
	if a.admin == nil {
		if a.cfg.AdvertiseHost != "" {
			a.log.Warn("--advertise-host is ignored: --admin-addr is empty, so there is nothing to watch; the cleaners reap this node through its Redis liveness subscription and heartbeat")
		}
		return ""
	}
	host, port, err := net.SplitHostPort(a.admin.Addr())
	if err != nil {
		return ""
	}
	if a.cfg.AdvertiseHost != "" {
		host = a.cfg.AdvertiseHost
	} else if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		a.log.Info("no address for the cleaners to watch this node at: the admin port listens on every interface; set --advertise-host (HEADCOUNT_ADVERTISE_HOST, e.g. the pod IP) so a killed node is reaped at once, not after --liveness-grace",
			"admin_addr", a.admin.Addr())
		return ""
	}
	return net.JoinHostPort(host, port)
}
