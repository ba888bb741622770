package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/dashboard"
	"github.com/headcount/headcount/pkg/httpx"
	"github.com/headcount/headcount/pkg/ratelimit"
)

const (
	// maxBodyBytes caps a request body before it is read and hashed for
	// body_md5. Pusher's largest request, a batch of 10 events of 10 KB,
	// fits many times over.
	maxBodyBytes = 1 << 20
	// requestTimeout bounds the Redis work of one request.
	requestTimeout = 5 * time.Second
	// drainGrace bounds reading the unread body of a refused request
	// (refuseUnread): a body already sent arrives within it.
	drainGrace = time.Second
)

// handler returns the API's routes wrapped in metrics and panic recovery.
func (a *App) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /apps/{app_id}/channels", a.signed(a.listChannels))
	mux.Handle("GET /apps/{app_id}/channels/{channel_name}", a.signed(a.getChannel))
	mux.Handle("GET /apps/{app_id}/channels/{channel_name}/users", a.signed(a.getUsers))
	mux.Handle("GET /apps/{app_id}/channels/{channel_name}/events", a.signed(a.getHistory))
	mux.Handle("POST /apps/{app_id}/events", a.signed(a.triggerEvent))
	mux.Handle("POST /apps/{app_id}/batch_events", a.signed(a.triggerBatch))
	mux.Handle("POST /apps/{app_id}/users/{user_id}/terminate_connections", a.signed(a.terminateConnections))
	mux.Handle("PUT /apps/{app_id}/channels/{channel_name}/capacity", a.signed(a.setCapacity))
	mux.Handle("DELETE /apps/{app_id}/channels/{channel_name}/capacity", a.signed(a.clearCapacity))
	mux.Handle("POST /apps/{app_id}/channels/{channel_name}/admission", a.signed(a.admissionCheck))
	mux.Handle("DELETE /apps/{app_id}/channels/{channel_name}/admission", a.signed(a.admissionLeave))
	mux.Handle("GET /apps/{app_id}/channels/{channel_name}/admission", a.signed(a.admissionState))
	mux.Handle("GET /apps/{app_id}/status", a.signed(a.getStatus))
	mux.Handle("GET /apps/{app_id}/admission", a.signed(a.getAdmissionLists))
	mux.Handle("GET /apps/{app_id}/audit", a.signed(a.getAudit))
	// For load balancers that check the port they send to: what /readyz
	// on the admin port says. No /apps/ route can be /up.
	mux.HandleFunc("GET /up", a.serveUp)
	if a.dash != nil {
		dashboard.Register(mux, *a.dash)
	}
	return a.instrument(mux)
}

// apiRequest is a signed request of an enabled app.
type apiRequest struct {
	app *apps.App
	// query holds the parameters with lowercased keys, each once: the
	// signature check lowercases keys and refuses repeats, so this is
	// exactly what was signed.
	query url.Values
	// body is the request body, read once under the size cap and checked
	// against body_md5.
	body []byte
}

// app returns the app of id, or nil. An id the process does not serve, or
// serves disabled or without key (the request's auth_key, "" if none), is
// first looked up in the apps' source (appreload.Reloader.Lookup), so an
// app inserted, enabled or given a key a moment ago answers its first
// request rather than a 404, 403 or 401 until the next poll.
func (a *App) app(ctx context.Context, id, key string) *apps.App {
	app := a.apps.ByID(id)
	serves := func() bool {
		if app == nil || !app.Enabled {
			return false
		}
		_, ok := app.SecretFor(key)
		return ok || key == ""
	}
	if !serves() {
		a.reload.Lookup(ctx, "id "+id+" key "+key, func() bool {
			app = a.apps.ByID(id)
			return serves()
		})
	}
	return app
}

// authKey is a parsed query's auth_key; the signature check reads keys
// without regard to case.
func authKey(query url.Values) string {
	for k, v := range query {
		if strings.EqualFold(k, "auth_key") && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// signed checks an /apps/{app_id}/ request before h sees it: known app
// (404), announced body within maxBodyBytes (413), well-formed query
// (400), valid signature over method, path and query (401, also when the
// query is ambiguous, see auth.VerifyQuery), enabled app
// (403); then it reads the body under the cap (413) and --read-timeout
// (408) and checks it against the signed body_md5 (401). Only a caller
// holding the app's secret gets its body read: anyone else is answered
// from the head alone and the connection closed, so a body that never
// arrives holds nothing. A request that fails its signature (or is
// refused before the check) closes its connection, body or not, so that
// nobody without the secret keeps connections open behind refusals.
func (a *App) signed(h func(http.ResponseWriter, *http.Request, *apiRequest)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("app_id")
		query, err := auth.ParseQuery(r.URL.RawQuery)
		app := a.app(r.Context(), id, authKey(query))
		if app == nil {
			a.refuseUnread(w, r, http.StatusNotFound, fmt.Sprintf("Unknown app id %s", strconv.Quote(id)))
			return
		}
		if r.ContentLength > maxBodyBytes {
			a.refuseUnread(w, r, http.StatusRequestEntityTooLarge, bodyTooLarge)
			return
		}
		if err != nil {
			a.refuseUnread(w, r, http.StatusBadRequest, fmt.Sprintf("Malformed query string: %v", err))
			return
		}
		sq, err := auth.VerifyQuery(r.Method, r.URL.Path, query, app, time.Now())
		if err == nil {
			err = sq.CheckLength(r.ContentLength)
		}
		if err != nil {
			a.refuseUnread(w, r, http.StatusUnauthorized, err.Error())
			return
		}
		if !app.Enabled {
			a.refuseUnread(w, r, http.StatusForbidden, fmt.Sprintf("App %s is disabled", strconv.Quote(app.ID)))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		if err != nil {
			switch tooBig := (*http.MaxBytesError)(nil); {
			case errors.As(err, &tooBig):
				httpx.Refuse(a.log, w, r, http.StatusRequestEntityTooLarge, bodyTooLarge)
			case errors.Is(err, os.ErrDeadlineExceeded):
				httpx.Refuse(a.log, w, r, http.StatusRequestTimeout, "The request body did not arrive within the server's read timeout")
			default:
				httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf("Could not read the request body: %v", err))
			}
			return
		}
		if err := sq.CheckBody(body); err != nil {
			w.Header().Set("Connection", "close")
			httpx.Refuse(a.log, w, r, http.StatusUnauthorized, err.Error())
			return
		}
		// Only a signed request spends the app's read budget.
		if r.Method == http.MethodGet && !a.allow(w, r, app, ratelimit.ReadRequests, 1) {
			return
		}
		lower := make(url.Values, len(query))
		for k, v := range query {
			lower[strings.ToLower(k)] = v
		}
		h(w, r, &apiRequest{app: app, query: lower, body: body})
	})
}

// bodyTooLarge is the 413 of a body over maxBodyBytes.
var bodyTooLarge = fmt.Sprintf("Request body is over the limit of %d bytes", maxBodyBytes)

// refuseUnread refuses a request from its head alone, whose sender has not
// shown it holds the app's secret, and closes the connection after the
// answer instead of keeping it: an anonymous client cannot hold keep-alive
// connections by sending requests that are refused (it can with GET /up,
// which load balancers need kept; the connection cap deals with those). If
// the request may have a body, net/http's drain of what is left of it (up
// to 256 KiB, read so the close does not reset the connection under an
// answer in flight) gets drainGrace instead of the rest of --read-timeout:
// a client that sent its body reads its answer, one that holds the body
// back holds nothing for long.
func (a *App) refuseUnread(w http.ResponseWriter, r *http.Request, code int, msg string) {
	w.Header().Set("Connection", "close")
	if r.ContentLength != 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainGrace)) // not supported in-process: nothing to drain there
	}
	httpx.Refuse(a.log, w, r, code, msg)
}

// infoAttrs splits an info parameter ("user_count,subscription_count").
func infoAttrs(info string) []string {
	var attrs []string
	for _, s := range strings.Split(info, ",") {
		if s = strings.TrimSpace(s); s != "" {
			attrs = append(attrs, s)
		}
	}
	return attrs
}

// redisFailed answers 503 for a failed Redis read: a count we could not read
// is never reported as 0.
func (a *App) redisFailed(w http.ResponseWriter, r *http.Request, app *apps.App, err error) {
	if r.Context().Err() != nil {
		// The client went away; Redis is not to blame and nobody reads the answer.
		a.log.Debug("request abandoned by the client", "path", r.URL.Path, "app_id", app.ID, "error", err)
		return
	}
	a.metrics.redisErrors.Inc()
	// While the readiness loop already reports Redis down (and has logged
	// it), one error line per request would only flood the logs.
	level := a.log.Error
	if !a.redisUp.Ready() {
		level = a.log.Debug
	}
	level("redis read failed", "method", r.Method, "path", r.URL.Path, "app_id", app.ID, "error", err)
	http.Error(w, "Counts are unavailable right now (Redis did not answer); try again", http.StatusServiceUnavailable)
}

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if !s.wrote {
		s.code, s.wrote = http.StatusOK, true
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// instrument counts and times every request by route pattern (bounded
// cardinality; "unmatched" for 404s and 405s the mux answers itself) and
// turns a handler panic into a 500 and an error log.
func (a *App) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			p := recover()
			if p != nil && p != http.ErrAbortHandler { //nolint:errorlint // recover values are compared, not unwrapped
				a.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if !rec.wrote {
					http.Error(rec, "Internal server error", http.StatusInternalServerError)
				}
				rec.code = http.StatusInternalServerError
			}
			// The mux sets r.Pattern on the request it was given.
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			a.metrics.requests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
			a.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
			if p == http.ErrAbortHandler { //nolint:errorlint // see above
				panic(p)
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

// serveUp answers GET and HEAD /up: 200 while ready, 503 otherwise (Redis
// unreachable, draining).
func (a *App) serveUp(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !a.ready() {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}
