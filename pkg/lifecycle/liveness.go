package lifecycle

import (
	"net/http"
	"time"
)

// MaxLivenessWatches bounds the responses a LivenessHandler holds open at
// once. Each holds a descriptor and a goroutine for as long as the process
// lives, and the admin port caps nothing else; a deployment needs one per
// active cleaner, a few more across a lease handover.
const MaxLivenessWatches = 64

// LivenessHandler answers GET with 200 at once and then holds the response
// open, with no body, until the request ends or done is closed. Whoever
// holds one to a process learns of the process's death the moment the
// kernel closes its connections (a SIGKILL, an OOM kill), without polling.
// Past MaxLivenessWatches held at once it answers 503.
func LivenessHandler(done <-chan struct{}) http.HandlerFunc {
	held := make(chan struct{}, MaxLivenessWatches)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		select {
		case held <- struct{}{}:
			defer func() { <-held }()
		default:
			http.Error(w, "too many liveness watches held", http.StatusServiceUnavailable)
			return
		}
		rc := http.NewResponseController(w)
		// The server's write deadline bounds ordinary requests; this one
		// lasts as long as the process, and its end must reach the client
		// as a complete response, not a cut that looks like a death.
		// (net/http clears the read deadline itself while a handler runs.)
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
		case <-done:
		}
	}
}
