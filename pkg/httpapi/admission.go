package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/httpx"
	"github.com/headcount/headcount/pkg/protocol"
)

// admissionChannel validates the {channel_name} of an admission route:
// admission counts distinct users, so only presence channels have it.
func (a *App) admissionChannel(w http.ResponseWriter, r *http.Request, app *apps.App) (string, bool) {
	ch := r.PathValue("channel_name")
	if err := protocol.ValidateChannelNameMax(ch, app.ChannelNameLimit()); err != nil {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf("Invalid channel name: %v", err))
		return "", false
	}
	if !admission.Limited(ch) {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf("Unknown channel for admission %s: capacities apply to presence channels only (they count distinct users)", strconv.Quote(ch)))
		return "", false
	}
	return ch, true
}

// admissionUser reads {"user_id": "..."} from the body.
func (a *App) admissionUser(w http.ResponseWriter, r *http.Request, req *apiRequest) (string, bool) {
	var body struct {
		UserID *string `json:"user_id"`
	}
	if err := json.Unmarshal(req.body, &body); err != nil {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf(`The body must be a JSON object like {"user_id": "..."}: %v`, err))
		return "", false
	}
	switch {
	case body.UserID == nil || *body.UserID == "":
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, "Missing user_id")
		return "", false
	case utf8.RuneCountInString(*body.UserID) > admission.MaxUserIDLength:
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf("user_id is %d characters long, over the limit of %d", utf8.RuneCountInString(*body.UserID), admission.MaxUserIDLength))
		return "", false
	}
	return *body.UserID, true
}

type admissionAnswer struct {
	Status    string `json:"status"`
	Ticket    string `json:"ticket,omitempty"`
	ExpiresIn *int   `json:"expires_in,omitempty"`
	Position  int    `json:"position,omitempty"`
	Waiting   *int   `json:"waiting,omitempty"`
	Capacity  int    `json:"capacity,omitempty"`
	Occupancy *int   `json:"occupancy,omitempty"`
}

// admissionCheck is POST .../admission: admitted with a ticket, or waiting
// with the place on the list. Calling it again is the check-in.
func (a *App) admissionCheck(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	ch, ok := a.admissionChannel(w, r, req.app)
	if !ok {
		return
	}
	user, ok := a.admissionUser(w, r, req)
	if !ok {
		return
	}
	rule := admission.RuleFor(req.app, ch)
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	res, err := a.gate.Check(ctx, req.app.ID, ch, user, rule)
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	direct := ""
	if res.New {
		direct = user
	}
	a.afterGate(req.app, ch, res.State, res.Changes, false, direct)
	switch res.Status {
	case admission.Waiting:
		httpx.WriteJSON(w, admissionAnswer{Status: "waiting", Position: res.Position, Waiting: &res.Waiting, Capacity: res.Capacity, Occupancy: &res.Occupancy})
	default:
		expires := res.ExpiresIn
		if res.Status == admission.Unlimited {
			expires = rule.Ticket
		}
		secs := int(math.Ceil(expires.Seconds()))
		httpx.WriteJSON(w, admissionAnswer{Status: "admitted", Ticket: admission.Ticket(req.app.Secret, ch, user, time.Now().Add(expires)), ExpiresIn: &secs})
	}
}

// admissionLeave is DELETE .../admission: leave the list or give up the
// ticket. A seat in use stays taken until its member leaves (see
// admission.Gate.Leave).
func (a *App) admissionLeave(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	ch, ok := a.admissionChannel(w, r, req.app)
	if !ok {
		return
	}
	user, ok := a.admissionUser(w, r, req)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	st, changes, err := a.gate.Leave(ctx, req.app.ID, ch, user, admission.RuleFor(req.app, ch))
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	// A leaving waiter moves the ones behind up: tell them.
	a.afterGate(req.app, ch, st, changes, true, "")
	httpx.WriteJSON(w, struct{}{})
}

// admissionState is GET .../admission.
func (a *App) admissionState(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	ch, ok := a.admissionChannel(w, r, req.app)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	st, changes, err := a.gate.State(ctx, req.app.ID, ch, admission.RuleFor(req.app, ch))
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	a.afterGate(req.app, ch, st, changes, false, "")
	httpx.WriteJSON(w, map[string]int{"capacity": st.Capacity, "occupancy": st.Occupancy, "waiting": st.Waiting})
}

// setCapacity is PUT .../capacity {"capacity": N}, 1 <= N <=
// apps.MaxCapacity.
func (a *App) setCapacity(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	ch, ok := a.admissionChannel(w, r, req.app)
	if !ok {
		return
	}
	var body struct {
		Capacity *json.Number `json:"capacity"`
	}
	if err := json.Unmarshal(req.body, &body); err != nil {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf(`The body must be a JSON object like {"capacity": 30}: %v`, err))
		return
	}
	if body.Capacity == nil {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, "Missing capacity")
		return
	}
	n, err := strconv.Atoi(body.Capacity.String())
	if err != nil || n < 1 || n > apps.MaxCapacity {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf("capacity must be a whole number from 1 to %d, not %s", apps.MaxCapacity, body.Capacity.String()))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	st, changes, err := a.gate.SetCapacity(ctx, req.app.ID, ch, n, admission.RuleFor(req.app, ch))
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	a.afterGate(req.app, ch, st, changes, false, "")
	httpx.WriteJSON(w, map[string]int{"capacity": n})
}

// clearCapacity is DELETE .../capacity: the apps file's rule applies again.
func (a *App) clearCapacity(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	ch, ok := a.admissionChannel(w, r, req.app)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	st, changes, err := a.gate.ClearCapacity(ctx, req.app.ID, ch, admission.RuleFor(req.app, ch))
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	a.afterGate(req.app, ch, st, changes, false, "")
	httpx.WriteJSON(w, struct{}{})
}

// afterGate announces a gate call (announce.Announcer.Admission) within a
// second of its own, whatever the request's context does.
func (a *App) afterGate(ap *apps.App, ch string, st admission.State, c admission.Changes, notify bool, direct string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a.announce.Admission(ctx, ap, ch, st, c, direct, notify)
}
