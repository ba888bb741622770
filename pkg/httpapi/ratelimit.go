package httpapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/httpx"
	"github.com/headcount/headcount/pkg/ratelimit"
)

// allow spends points from app's per-second budget of kind, shared with
// every replica (pkg/ratelimit). Past the budget it answers 429 with
// Retry-After and a body naming the setting, and returns false. A limited
// app's answers carry X-RateLimit-Limit and X-RateLimit-Remaining, as
// soketi's do.
func (a *App) allow(w http.ResponseWriter, r *http.Request, app *apps.App, kind ratelimit.Kind, points int) bool {
	limit, setting, what := app.MaxReadRequestsPerSecond, "maxReadRequestsPerSecond", "read requests"
	if kind == ratelimit.BackendEvents {
		limit, setting, what = app.MaxBackendEventsPerSecond, "maxBackendEventsPerSecond", "events (each channel of each event counting one)"
	}
	if limit <= 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	res := a.limiter.Take(ctx, app.ID, kind, limit, points)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(res.Limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
	if res.Allowed {
		return true
	}
	h.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(res.Reset.Seconds())))))
	httpx.Refuse(a.log, w, r, http.StatusTooManyRequests, fmt.Sprintf(
		"Too many requests: app %s allows %d %s per second through the HTTP API (%s); this request needs %d and %d are left; retry in %.2f s",
		strconv.Quote(app.ID), limit, what, setting, points, res.Remaining, res.Reset.Seconds()))
	return false
}
