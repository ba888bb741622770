package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/httpx"
	"github.com/headcount/headcount/pkg/protocol"
)

// Bounds of GET .../events' limit.
const (
	defaultHistoryLimit = 100
	maxHistoryLimit     = 1000
)

// historyQuery is what GET .../events asks: the events after since (""
// for the oldest held), at most limit of them.
type historyQuery struct {
	since string
	limit int
}

// parseHistoryQuery reads since and limit from a signed query (keys
// lowercased, each once).
func parseHistoryQuery(q url.Values) (historyQuery, error) {
	h := historyQuery{since: q.Get("since"), limit: defaultHistoryLimit}
	if h.since != "" {
		if err := history.CheckSerial(h.since); err != nil {
			return h, fmt.Errorf("since: %w", err)
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxHistoryLimit {
			return h, fmt.Errorf("limit: %s is not a whole number from 1 to %d", strconv.Quote(s), maxHistoryLimit)
		}
		h.limit = n
	}
	return h, nil
}

// getHistory serves GET /apps/{app_id}/channels/{channel_name}/events: a
// page of the channel's history, history.Page as JSON.
func (a *App) getHistory(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	name := r.PathValue("channel_name")
	if err := protocol.ValidateChannelNameMax(name, req.app.ChannelNameLimit()); err != nil {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, "Invalid channel name: "+err.Error())
		return
	}
	if req.app.HistoryFor(name).Events == 0 {
		httpx.Refuse(a.log, w, r, http.StatusNotFound, fmt.Sprintf("Channel %s has no history: no prefix of the app's history field names it", strconv.Quote(name)))
		return
	}
	q, err := parseHistoryQuery(req.query)
	if err != nil {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	p, err := a.bus.History().Since(ctx, req.app.ID, name, q.since, q.limit)
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	httpx.WriteJSON(w, p)
}
