package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/httpx"
	"github.com/headcount/headcount/pkg/protocol"
)

// maxUserIDLength is wsnode's limit on a signed-in user id (characters):
// no socket can be signed in as a longer one.
const maxUserIDLength = 128

// terminateEvent names the bus message on protocol.TerminateUserChannel;
// wsnode acts on the channel, the name is for logs and debugging.
const terminateEvent = "terminate_connections"

// getUsers serves GET /apps/{app_id}/channels/{channel_name}/users: the
// distinct users of a presence channel across the cluster.
func (a *App) getUsers(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	name := r.PathValue("channel_name")
	if err := protocol.ValidateChannelNameMax(name, req.app.ChannelNameLimit()); err != nil {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, "Invalid channel name: "+err.Error())
		return
	}
	if !protocol.ChannelKind(name).HasMembers() {
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf("Users can only be listed for presence channels, and %s is not one", strconv.Quote(name)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	members, err := a.store.Members(ctx, req.app.ID, name)
	if err != nil {
		a.redisFailed(w, r, req.app, err)
		return
	}
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids) // a stable answer for a set
	type user struct {
		ID string `json:"id"`
	}
	resp := struct {
		Users []user `json:"users"`
	}{Users: make([]user, len(ids))}
	for i, id := range ids {
		resp.Users[i].ID = id
	}
	httpx.WriteJSON(w, resp)
}

// terminateConnections serves POST /apps/{app_id}/users/{user_id}/
// terminate_connections: one bus message on the user's terminate channel,
// which every node holding a socket signed in as the user has joined; each
// closes those sockets with pusher:error 4009 and close code 4009
// (docs/REFERENCE.md, "HTTP API", Users; docs/INTERNALS.md, "wsnode").
func (a *App) terminateConnections(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	body := req.body
	user := r.PathValue("user_id")
	switch n := utf8.RuneCountInString(user); {
	case user == "":
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, "The user id is empty")
		return
	case !utf8.ValidString(user):
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, "The user id is not valid UTF-8")
		return
	case n > maxUserIDLength:
		httpx.Refuse(a.log, w, r, http.StatusBadRequest, fmt.Sprintf("The user id is %d characters long, over the limit of %d", n, maxUserIDLength))
		return
	}
	// The SDKs send {}; an empty body is fine too, anything else is a mistake.
	if len(bytes.TrimSpace(body)) > 0 {
		var obj map[string]any
		if err := decodeJSON(body, &obj); err != nil {
			a.refuseParse(w, r, err)
			return
		}
	}
	msg := fanout.Message{Channel: protocol.TerminateUserChannel(user), Event: terminateEvent}
	if !a.publish(w, r, req.app, []fanout.Message{msg}, nil) {
		return
	}
	httpx.WriteJSON(w, struct{}{})
}
