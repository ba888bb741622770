package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/redistest"
)

// compatTimeout bounds the whole Node suite; it ends by itself in well under
// 90 s when the cluster behaves.
const compatTimeout = 3 * time.Minute

// userAuthTimeout is the wsnodes' --user-auth-timeout in the suite.
const userAuthTimeout = 2 * time.Second

// TestPusherJSCompat runs the Node compatibility suite (test/compat/suite,
// node --test) against a real cluster: redis, two wsnodes, two cleaners and
// the httpapi, all sharing one apps file. The suite drives real pusher-js 8
// clients and signs with the real pusher Node SDK 5; its last file SIGKILLs
// wsnode B (HC_KILL_PID_B).
//
// The wsnodes serve their sockets on the default transport, the event loop;
// TestPusherJSCompatGoroutine runs the suite's core files on the fallback.
func TestPusherJSCompat(t *testing.T) {
	runCompat(t, "", nil)
}

// TestPusherJSCompatGoroutine runs the suite's core files (the channel
// kinds, signin, client events and Laravel Echo) against wsnodes on
// --transport goroutine, so the fallback an operator may switch to keeps
// working with the real clients.
func TestPusherJSCompatGoroutine(t *testing.T) {
	runCompat(t, "goroutine", []string{"suite/01-public.test.js", "suite/02-private.test.js", "suite/03-presence.test.js",
		"suite/04-encrypted.test.js", "suite/05-signin.test.js", "suite/06-client-events.test.js", "suite/15-laravel-echo.test.js"})
}

// runCompat runs the suite files (all of them if none; HC_COMPAT_FILES
// overrides) against a cluster whose wsnodes have --transport transport
// (their default if empty).
func runCompat(t *testing.T, transport string, files []string) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	t.Parallel() // its own Redis and processes; the suite waits on them
	compatDir := filepath.Join(repoRoot(t), "test", "compat")
	for _, pkg := range []string{"pusher-js", "pusher", "laravel-echo"} {
		if _, err := os.Stat(filepath.Join(compatDir, "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("%s is not installed in test/compat/node_modules: run `make test` (it runs npm ci in test/compat): %v", pkg, err)
		}
	}
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (Node 18+ is needed for the compatibility suite): run `make test` or install nodejs")
	}

	// app-id has client events on and a capacity of 1 on presence-cap-
	// channels (08-admission.test.js); app-id and app3 let a connection hold
	// 1,000 channels, the most an app may, and app2 the default 100
	// (09-many-channels.test.js); app2 has client events off; app3
	// sends subscription_count (09-many-channels.test.js); app4 requires
	// user authentication (10-user-auth.test.js); limitsApp has small rate
	// limits, a short channel name limit and allowed origins
	// (13-limits.test.js).
	type appEntry struct {
		ID                      string           `json:"id"`
		Key                     string           `json:"key"`
		Secret                  string           `json:"secret"`
		EnableClientMessages    bool             `json:"enableClientMessages"`
		EnableSubscriptionCount bool             `json:"enableSubscriptionCount,omitempty"`
		EnableUserAuth          bool             `json:"enableUserAuthentication,omitempty"`
		Capacities              []map[string]any `json:"capacities,omitempty"`
		Admission               map[string]int   `json:"admission,omitempty"`
		Webhooks                []map[string]any `json:"webhooks,omitempty"`
		// Soketi's spellings, as a soketi apps file has them.
		MaxClientEventsPerSecond  int      `json:"max_client_events_per_sec,omitempty"`
		MaxBackendEventsPerSecond int      `json:"maxBackendEventsPerSecond,omitempty"`
		MaxReadRequestsPerSecond  int      `json:"maxReadRequestsPerSecond,omitempty"`
		MaxChannelNameLength      int      `json:"maxChannelNameLength,omitempty"`
		AllowedOrigins            []string `json:"allowed_origins,omitempty"`
		MaxChannelsPerConnection  int      `json:"maxChannelsPerConnection,omitempty"`
	}
	apps := []appEntry{
		{ID: "app-id", Key: "app-key", Secret: "app-secret", EnableClientMessages: true,
			Capacities: []map[string]any{{"prefix": "presence-cap-", "capacity": 1}},
			Admission:  map[string]int{"dropoutSeconds": 30, "graceSeconds": 1, "ticketSeconds": 30}, MaxChannelsPerConnection: 1000},
		{ID: "app2-id", Key: "app2-key", Secret: "app2-secret", EnableClientMessages: false},
		{ID: "app3-id", Key: "app3-key", Secret: "app3-secret", EnableSubscriptionCount: true, MaxChannelsPerConnection: 1000},
		{ID: "app4-id", Key: "app4-key", Secret: "app4-secret", EnableUserAuth: true},
	}
	// The webhook app batches its webhooks to a receiver the suite runs on
	// hooksAddr (suite/webhooks.js), with a header and a filter
	// (14-webhook-batch.test.js, 99-sigkill.test.js).
	hooksAddr := freeAddr(t)
	const hooksBatch, hooksToken, hooksPrefix = 5, "compat-t0ken", "presence-hook-"
	hooks := appEntry{ID: "hooks-id", Key: "hooks-key", Secret: "hooks-secret", EnableClientMessages: true,
		Webhooks: []map[string]any{{"url": "http://" + hooksAddr + "/hooks",
			"event_types": []string{"channel_occupied", "channel_vacated", "member_added", "member_removed", "client_event"},
			"headers":     map[string]string{"X-Hook-Token": hooksToken},
			"filter":      map[string]string{"channel_name_starts_with": hooksPrefix},
			"batch":       map[string]int{"size": hooksBatch, "maxWaitMs": 200}}}}
	apps = append(apps, hooks)
	// The cache app sends cache_miss webhooks to a receiver
	// 11-cache.test.js runs on cacheHookAddr.
	cacheHookAddr := freeAddr(t)
	cacheApp := appEntry{ID: "cache-id", Key: "cache-key", Secret: "cache-secret",
		Webhooks: []map[string]any{{"url": "http://" + cacheHookAddr + "/cache", "event_types": []string{"cache_miss"}}}}
	apps = append(apps, cacheApp)
	limitsApp := appEntry{ID: "limits-id", Key: "limits-key", Secret: "limits-secret", EnableClientMessages: true,
		MaxClientEventsPerSecond: 2, MaxBackendEventsPerSecond: 5, MaxReadRequestsPerSecond: 3, MaxChannelNameLength: 40,
		AllowedOrigins: []string{"https://good.example", "*.good.example"}}
	apps = append(apps, limitsApp)
	appsJSON, err := json.Marshal(apps)
	if err != nil {
		t.Fatal(err)
	}
	appsFile := filepath.Join(t.TempDir(), "apps.json")
	if err := os.WriteFile(appsFile, appsJSON, 0o600); err != nil {
		t.Fatal(err)
	}

	srv := redistest.New(t)
	common := []string{"--redis", srv.URL(), "--apps-file", appsFile}
	wsArgs := append(slices.Clone(common), "--user-auth-timeout", userAuthTimeout.String())
	if transport != "" {
		wsArgs = append(wsArgs, "--transport", transport)
	}
	a, b := startWSNode(t, "ws-a", wsArgs...), startWSNode(t, "ws-b", wsArgs...)
	cl1, cl2 := startCleaner(t, "cleaner-1", common...), startCleaner(t, "cleaner-2", common...)
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", append(common, "--addr", api.addr, "--admin-addr", api.admin)...)
	for _, n := range []node{a, b, cl1, cl2, api} {
		waitReady(t, n.p, n.admin)
	}

	ctx, cancel := context.WithTimeout(context.Background(), compatTimeout)
	defer cancel()
	// HC_COMPAT_FILES narrows the run to some suite files while working on them.
	if f := strings.Fields(os.Getenv("HC_COMPAT_FILES")); len(f) > 0 {
		files = f
	}
	if len(files) == 0 {
		files = []string{"suite/"}
	}
	cmd := exec.CommandContext(ctx, nodeBin, append([]string{"--test", "--test-concurrency=1", "--test-reporter=spec"}, files...)...)
	cmd.Dir = compatDir
	cmd.Env = append(os.Environ(),
		"HC_WS_HOSTS="+a.addr+","+b.addr,
		"HC_APP_ID="+apps[0].ID, "HC_APP_KEY="+apps[0].Key, "HC_APP_SECRET="+apps[0].Secret,
		"HC_APP2_ID="+apps[1].ID, "HC_APP2_KEY="+apps[1].Key, "HC_APP2_SECRET="+apps[1].Secret,
		"HC_APP3_ID="+apps[2].ID, "HC_APP3_KEY="+apps[2].Key, "HC_APP3_SECRET="+apps[2].Secret,
		"HC_APP4_ID="+apps[3].ID, "HC_APP4_KEY="+apps[3].Key, "HC_APP4_SECRET="+apps[3].Secret,
		"HC_HOOKS_APP_ID="+hooks.ID, "HC_HOOKS_APP_KEY="+hooks.Key, "HC_HOOKS_APP_SECRET="+hooks.Secret,
		"HC_HOOKS_ADDR="+hooksAddr, "HC_HOOKS_BATCH_SIZE="+strconv.Itoa(hooksBatch), "HC_HOOKS_TOKEN="+hooksToken, "HC_HOOKS_PREFIX="+hooksPrefix,
		"HC_CACHE_APP_ID="+cacheApp.ID, "HC_CACHE_APP_KEY="+cacheApp.Key, "HC_CACHE_APP_SECRET="+cacheApp.Secret, "HC_CACHE_HOOK_ADDR="+cacheHookAddr,
		"HC_LIMITS_APP_ID="+limitsApp.ID, "HC_LIMITS_APP_KEY="+limitsApp.Key, "HC_LIMITS_APP_SECRET="+limitsApp.Secret,
		"HC_USER_AUTH_TIMEOUT_MS="+strconv.FormatInt(userAuthTimeout.Milliseconds(), 10),
		"HC_API="+api.addr,
		"HC_KILL_PID_B="+strconv.Itoa(b.p.cmd.Process.Pid),
		"HC_DEAD_AFTER_MS="+strconv.FormatInt(deadAfter.Milliseconds(), 10),
		"HC_SCAN_INTERVAL_MS="+strconv.FormatInt(scanInterval.Milliseconds(), 10),
		"NO_COLOR=1",
	)
	// On timeout, stop the runner and its test-file children (own process
	// group), and don't wait for pipes held open by a stray child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	began := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(began).Round(100 * time.Millisecond)
	switch {
	case ctx.Err() != nil:
		t.Fatalf("node --test did not finish within %v; output:\n%s", compatTimeout, out)
	case err != nil:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("node --test failed (exit %d, %v); output:\n%s", exit.ExitCode(), took, out)
		}
		t.Fatalf("node --test: %v; output:\n%s", err, out)
	}
	t.Logf("node --test passed in %v; output:\n%s", took, out)
}
