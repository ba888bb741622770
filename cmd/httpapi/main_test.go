package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
)

// TestMain runs the binary's main instead of the tests when asked, so tests
// can check exit codes and signals on a real process.
func TestMain(m *testing.M) {
	if os.Getenv("HTTPAPI_TEST_MAIN") == "1" {
		os.Args = append([]string{"httpapi"}, strings.Fields(os.Getenv("HTTPAPI_TEST_ARGS"))...)
		main()
		return
	}
	os.Exit(m.Run())
}

func noEnv(string) (string, bool) { return "", false }

func TestBadFlagExits2NamingTheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--addr", "nonsense"}, want: "--addr"},
		{args: []string{"--log-format", "xml"}, want: "--log-format"},
		{args: []string{"--no-such-flag"}, want: "no-such-flag"},
		{env: map[string]string{"HEADCOUNT_REDIS": "mysql://x"}, want: "--redis"},
		{args: []string{"serve"}, want: `unexpected argument "serve": httpapi takes flags only`},
	} {
		var stderr bytes.Buffer
		env := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		code := run(tc.args, env, &stderr)
		require.Equal(t, 2, code, "args %v: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), "httpapi: invalid configuration")
		require.Contains(t, stderr.String(), tc.want)
	}
}

func TestHelpExits0(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, noEnv, &stderr))
	require.Contains(t, stderr.String(), "-addr")
}

func TestListenFailureExits1(t *testing.T) {
	// A valid address that is taken: config accepts it, New fails to bind.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	var stderr bytes.Buffer
	code := run([]string{"--addr", busy.Addr().String(), "--admin-addr", ""}, noEnv, &stderr)
	require.Equal(t, 1, code, stderr.String())
	require.Contains(t, stderr.String(), "--addr")
}

func TestSIGTERMStopsCleanly(t *testing.T) {
	srv := redistest.New(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HTTPAPI_TEST_MAIN=1",
		"HTTPAPI_TEST_ARGS=--addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --redis "+srv.URL())
	var stderr proctest.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // harmless once it has exited
		<-exited
	})

	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "redis is reachable") },
		10*time.Second, 10*time.Millisecond, "httpapi did not become ready:\n%s", stderr.String())
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		require.NoError(t, waitErr, "exit after SIGTERM:\n%s", stderr.String())
		require.Contains(t, stderr.String(), "stopped")
	case <-time.After(10 * time.Second):
		t.Fatalf("httpapi did not exit within 10s of SIGTERM:\n%s", stderr.String())
	}
}

// TestAppCredentialsExit2 runs the binary's main with the default app's
// credential variables partly set, or set to "": it exits 2 naming the
// variable, instead of serving the published app-secret. With none set it
// gets past the configuration (here to a taken port: exit 1).
func TestAppCredentialsExit2(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	proctest.RequireCredentialExits(t, []string{"-test.run=^$"}, map[string]string{"HTTPAPI_TEST_MAIN": "1", "HTTPAPI_TEST_ARGS": "--admin-addr= --addr " + taken.Addr().String()}, "--addr")
}
