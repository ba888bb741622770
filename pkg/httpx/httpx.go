package httpx

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/hashicorp/go-hclog"
)

// WriteJSON answers with v encoded.
func WriteJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own types get here; this is a bug
		panic(fmt.Sprintf("httpx: encode response: %v", err))
	}
	WriteJSONBody(w, append(b, '\n'))
}

// WriteJSONBody answers with b, encoded JSON with its trailing newline.
func WriteJSONBody(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// Refuse answers r with code and msg in plain text and logs it on log at
// debug.
func Refuse(log hclog.Logger, w http.ResponseWriter, r *http.Request, code int, msg string) {
	log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", code, "reason", msg)
	http.Error(w, msg, code)
}
