package dashboard

// register.go: Register, what it takes, the pages and their assets
// (assets/, embedded).

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net/http"

	"github.com/hashicorp/go-hclog"

	"github.com/headcount/headcount/pkg/apps"
)

//go:embed assets
var files embed.FS

// assets is assets/ as served under /dashboard/assets/.
var assets = func() fs.FS {
	sub, err := fs.Sub(files, "assets")
	if err != nil { // the directory is embedded above: cannot happen
		panic(err)
	}
	return sub
}()

// pageSecurityPolicy keeps the pages to their own scripts and styles; the
// demo room's pusher-js opens a WebSocket to a wsnode on another port.
const pageSecurityPolicy = "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Options is what the dashboard needs from the server that serves it.
type Options struct {
	// API serves the signed HTTP API (/apps/...): the handlers here run
	// the requests they sign through it, in-process. Required.
	API http.Handler
	// Apps are the apps the dashboard shows; the demo room is the first's.
	// Required.
	Apps *apps.Registry
	// Lookup returns the app of an id a request names, first reading the
	// apps' source when Apps does not serve it (httpapi's, through
	// appreload.Reloader.Lookup); nil reads Apps only.
	Lookup func(ctx context.Context, id string) *apps.App
	// DemoWS is the wsnode host:port the demo page's pusher-js connects to
	// (--demo-ws, already validated); an empty host or an unspecified
	// address (0.0.0.0, ::) stands for the page's own host.
	DemoWS string
	// Hosts are the host names the routes answer to besides IP addresses
	// and localhost names (case and a final dot aside): --dashboard-hosts
	// and the host of --addr (guard.go).
	Hosts []string
	// Logger logs refused requests at debug; nil logs nothing.
	Logger hclog.Logger
}

// server is the dashboard and the demo room registered on one mux.
type server struct {
	api    http.Handler
	apps   *apps.Registry
	byID   func(ctx context.Context, id string) *apps.App
	demoWS string
	hosts  map[string]bool
	log    hclog.Logger
}

// Register adds the dashboard's and the demo room's pages and unsigned
// handlers to mux (demo.go has the demo's), each behind guard (guard.go).
func Register(mux *http.ServeMux, opts Options) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	d := &server{api: opts.API, apps: opts.Apps, byID: opts.Lookup, demoWS: opts.DemoWS, hosts: hostSet(opts.Hosts), log: log.Named("dashboard")}
	if d.byID == nil {
		d.byID = func(_ context.Context, id string) *apps.App { return d.apps.ByID(id) }
	}
	handle := func(pattern string, h http.Handler) { mux.Handle(pattern, d.guard(h)) }
	handle("GET /dashboard", servePage("dashboard.html"))
	handle("GET /dashboard/assets/", http.StripPrefix("/dashboard/assets/", noCache(http.FileServerFS(assets))))
	handle("GET /dashboard/api/overview", http.HandlerFunc(d.dashboardOverview))
	handle("GET /dashboard/api/members", http.HandlerFunc(d.dashboardMembers))
	handle("GET /demo", servePage("demo.html"))
	handle("GET /demo/api/config", http.HandlerFunc(d.demoConfig))
	handle("GET /demo/api/room", http.HandlerFunc(d.demoRoom))
	handle("POST /demo/api/join", http.HandlerFunc(d.demoJoin))
	handle("POST /demo/api/leave", http.HandlerFunc(d.demoLeave))
	handle("POST /demo/api/auth", http.HandlerFunc(d.demoAuth))
}

// noCache makes browsers revalidate the assets, so a new build shows at once.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

func servePage(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		b, err := fs.ReadFile(assets, name)
		if err != nil { // embedded at build time: a missing page is a bug
			panic(fmt.Sprintf("dashboard: page %s is not embedded: %v", name, err))
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", pageSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b)
	}
}
