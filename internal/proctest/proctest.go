package proctest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Buffer is a bytes.Buffer safe to read while a process writes to it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Environ is os.Environ() without the variables whose names start with
// one of drop, plus set: the environment of a child process that must not
// inherit settings from whoever runs the tests.
func Environ(set map[string]string, drop ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(drop, func(p string) bool { return strings.HasPrefix(name, p) }) {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// RequireCredentialExits runs the test binary again as a binary's main
// (with args and mainEnv, which say so and make it fail just past its
// configuration, with exit 1 and noneWant in its output) under the default
// app's credential variables partly set, or set to "": each must exit 2
// naming the variable rather than serve the published app-secret.
func RequireCredentialExits(t *testing.T, args []string, mainEnv map[string]string, noneWant string) {
	t.Helper()
	for _, tc := range []struct {
		env  map[string]string
		code int
		want string
	}{
		{map[string]string{"HEADCOUNT_APP_KEY": "k"}, 2, "HEADCOUNT_APP_SECRET is not set"},
		{map[string]string{"HEADCOUNT_APP_ID": "a", "HEADCOUNT_APP_KEY": "k", "HEADCOUNT_APP_SECRET": ""}, 2, "HEADCOUNT_APP_SECRET is set but blank"},
		{map[string]string{"HEADCOUNT_APP_SECRET": ""}, 2, "HEADCOUNT_APP_SECRET is set but blank"},
		{map[string]string{"SOKETI_DEFAULT_APP_ID": "a", "SOKETI_DEFAULT_APP_KEY": "k"}, 2, "SOKETI_DEFAULT_APP_SECRET is not set"},
		{nil, 1, noneWant},
	} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = Environ(mainEnv, "HEADCOUNT_", "SOKETI_")
		for k, v := range tc.env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		require.Equal(t, tc.code, cmd.ProcessState.ExitCode(), "%v: %v\n%s", tc.env, err, out)
		require.Contains(t, string(out), tc.want, "%v", tc.env)
	}
}

// LogLines returns the lines of a JSON log (hclog's format) whose message
// contains msg, decoded.
func LogLines(log, msg string) []map[string]any {
	var out []map[string]any
	for _, raw := range strings.Split(log, "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(raw), &l) == nil && strings.Contains(fmt.Sprint(l["@message"]), msg) {
			out = append(out, l)
		}
	}
	return out
}

// Get GETs url, giving up after timeout, and returns the status and body
// (status 0 and the error's text if there was no answer).
func Get(url string, timeout time.Duration) (int, string) {
	c := http.Client{Timeout: timeout}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
