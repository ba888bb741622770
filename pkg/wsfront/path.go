package wsfront

import (
	"errors"
	"strings"
)

// ParsePath splits the path of a WebSocket request: /app/{key}, or
// /r/{id}/app/{key}, which pusher-js connects to when a page passes it
// wsPath "/r/"+id (it builds wsPath+"/app/"+key; Laravel Echo passes the
// option through). The id is the page's resume id: the same on every
// reconnect, so a node can key what the page missed on (app, id). It is
// 8-64 characters of A-Z a-z 0-9 _ -: long enough not to be guessed by
// accident, short and plain enough to log. Any other path is an error
// that says why; the fronts refuse it with 404.
func ParsePath(path string) (key, resumeID string, err error) {
	if rest, ok := strings.CutPrefix(path, "/r/"); ok {
		var found bool
		resumeID, path, found = strings.Cut(rest, "/")
		path = "/" + path
		switch {
		case !found:
			return "", "", errPath
		case !validResumeID(resumeID):
			return "", "", errResumeID
		}
	}
	key, ok := strings.CutPrefix(path, "/app/")
	if !ok || key == "" || strings.Contains(key, "/") {
		return "", "", errPath
	}
	return key, resumeID, nil
}

var (
	errPath     = errors.New("404 page not found: WebSockets are served on /app/{key} and /r/{id}/app/{key}")
	errResumeID = errors.New("404 page not found: the resume id of /r/{id}/app/{key} must be 8-64 characters of A-Z a-z 0-9 _ -")
)

// validResumeID holds the id to what ParsePath says.
func validResumeID(id string) bool {
	if len(id) < 8 || len(id) > 64 {
		return false
	}
	for i := range len(id) {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
