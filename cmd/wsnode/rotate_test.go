package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
)

// TestRedisCredentialsRotateUnderSockets: the wsnode binary on a TLS Redis
// that requires a client certificate and a password, with sockets
// subscribed, has its client certificate (a new key pair) and its password
// rotated through the files of a Secret, and then loses every Redis
// connection. It reconnects with the new ones: no socket is dropped, the
// counts stay exact and a new socket is counted; /metrics shows the new
// certificate's expiry.
func TestRedisCredentialsRotateUnderSockets(t *testing.T) {
	ca := redistest.NewCA(t, "CA", 10*time.Hour)
	srvCert := ca.Issue(t, true, 10*time.Hour)
	server := redistest.NewSecretDir(t)
	server.Write(t, map[string][]byte{"ca.pem": ca.PEM, "server.pem": srvCert.PEM, "server-key.pem": srvCert.Key})
	client1 := ca.Issue(t, false, 2*time.Hour)
	secret := redistest.NewSecretDir(t)
	secret.Write(t, map[string][]byte{"ca.crt": ca.PEM, "tls.crt": client1.PEM, "tls.key": client1.Key, "password": []byte("password-one\n")})
	srv := redistest.NewTLS(t, &redistest.TLSFiles{CA: server.Path("ca.pem"), ServerCert: server.Path("server.pem"), ServerKey: server.Path("server-key.pem"),
		ClientCert: secret.Path("tls.crt"), ClientKey: secret.Path("tls.key")}, "yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := srv.AdminClient(t, ca)
	do := func(args ...any) {
		t.Helper()
		require.NoError(t, admin.Do(ctx, args...).Err(), args)
	}
	do("CONFIG", "SET", "requirepass", "password-one")
	store := counts.NewStore(admin, keyspace.Space{})
	count := func() int64 { n, _ := store.Channel(ctx, "app-id", "room"); return n }

	log := &proctest.Buffer{}
	cmd := exec.Command(os.Args[0], "--redis", srv.URL(), "--redis-tls-ca", secret.Path("ca.crt"),
		"--redis-tls-cert", secret.Path("tls.crt"), "--redis-tls-key", secret.Path("tls.key"),
		"--redis-password-file", secret.Path("password"),
		"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--heartbeat", "100ms", "--drain", "200ms",
		"--log-format", "json", "--node-id", "rotating-node")
	cmd.Env, cmd.Stderr = append(os.Environ(), "WSNODE_TEST_MAIN=1"), log
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("wsnode log:\n%s", log.String())
		}
	})
	require.Eventually(t, func() bool { return len(proctest.LogLines(log.String(), "serving")) > 0 }, 20*time.Second, 10*time.Millisecond, "wsnode did not start")
	serving := proctest.LogLines(log.String(), "serving")[0]
	addr, adminAddr := fmt.Sprint(serving["addr"]), fmt.Sprint(serving["admin_addr"])
	metrics := func() string { _, body := proctest.Get("http://"+adminAddr+"/metrics", 5*time.Second); return body }

	subscribe := func() *websocket.Conn {
		t.Helper()
		c, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/app-key?protocol=7", nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.CloseNow() })
		_, _, err = c.Read(ctx) // connection_established
		require.NoError(t, err)
		require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"room"}}`)))
		_, msg, err := c.Read(ctx)
		require.NoError(t, err)
		require.Contains(t, string(msg), "subscription_succeeded")
		return c
	}
	const sockets = 20
	var conns []*websocket.Conn
	for range sockets {
		conns = append(conns, subscribe())
	}
	require.Eventually(t, func() bool { return count() == sockets }, 20*time.Second, 10*time.Millisecond, "counts before")
	require.Contains(t, metrics(), fmt.Sprintf(`headcount_tls_cert_expiry_timestamp_seconds{file=%q} %s`, secret.Path("tls.crt"), promFloat(client1.Cert.NotAfter.Unix())))

	// The rotation: a new key pair, and a new password added on Redis,
	// written to the file, then the old one removed.
	do("ACL", "SETUSER", "default", ">password-two")
	client2 := ca.Issue(t, false, 3*time.Hour)
	secret.Write(t, map[string][]byte{"ca.crt": ca.PEM, "tls.crt": client2.PEM, "tls.key": client2.Key, "password": []byte("password-two\n")})
	wantExpiry := fmt.Sprintf(`headcount_tls_cert_expiry_timestamp_seconds{file=%q} %s`, secret.Path("tls.crt"), promFloat(client2.Cert.NotAfter.Unix()))
	reloaded := fmt.Sprintf(`headcount_redis_file_reloads_total{file=%q,result="ok"} 1`, secret.Path("password"))
	require.Eventually(t, func() bool { m := metrics(); return strings.Contains(m, wantExpiry) && strings.Contains(m, reloaded) },
		20*time.Second, 50*time.Millisecond, "the node reloads the files")
	do("ACL", "SETUSER", "default", "<password-one")
	do("CLIENT", "KILL", "TYPE", "normal")
	do("CLIENT", "KILL", "TYPE", "pubsub")

	// New connections carry the new credentials: a new socket is counted,
	// and the sockets held through it all still answer.
	conns = append(conns, subscribe())
	require.Eventually(t, func() bool { return count() == sockets+1 }, 20*time.Second, 10*time.Millisecond,
		"counts after the rotation: %d", count())
	for i, c := range conns {
		require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:ping","data":{}}`)), "socket %d", i)
		_, msg, err := c.Read(ctx)
		require.NoError(t, err, "socket %d", i)
		require.Contains(t, string(msg), "pusher:pong", "socket %d", i)
	}
	require.EqualValues(t, sockets+1, count())
	lines := proctest.LogLines(log.String(), "reloaded a Redis file")
	require.NotEmpty(t, lines)
	require.Equal(t, "wsnode.redis", lines[0]["@module"])
}

// promFloat formats v as the Prometheus text format writes a float.
func promFloat(v int64) string { return strconv.FormatFloat(float64(v), 'g', -1, 64) }
