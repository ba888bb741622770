package wsnode

import (
	"net"
	"net/http"
	"time"
)

// serveLiveness answers GET /liveness on the admin port: 200 at once, then
// an open response until the request ends or the node has released its
// liveness subscription (after its graceful stop removed its counts). A
// cleaner holding it learns of the process's death when the kernel closes
// the connection, within a millisecond of a SIGKILL or an OOM kill.
func (a *App) serveLiveness(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	rc := http.NewResponseController(w)
	// The admin server's write deadline bounds ordinary requests; this one
	// lasts as long as the node, and its end must reach the cleaner as a
	// complete response, not a cut that looks like a death. (net/http
	// clears the read deadline itself while a handler runs.)
	if rc.SetWriteDeadline(time.Time{}) != nil {
		http.Error(w, "cannot hold this connection open", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	select {
	case <-r.Context().Done():
	case <-a.liveDone:
	}
}

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
