package redisx_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/redisx"
)

// loadLoop sends INCRs through rdb until stopped and records the longest
// time commands kept failing in a row.
type loadLoop struct {
	mu           sync.Mutex
	ok           int
	failingSince time.Time
	longest      time.Duration
	lastErr      error
	stop         func()
	done         chan struct{}
}

func startLoad(rdb redis.UniversalClient) *loadLoop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loadLoop{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for ctx.Err() == nil {
			err := rdb.Incr(ctx, "load").Err()
			now := time.Now()
			l.mu.Lock()
			switch {
			case err == nil:
				l.ok++
				if !l.failingSince.IsZero() {
					l.longest = max(l.longest, now.Sub(l.failingSince))
					l.failingSince = time.Time{}
				}
			case ctx.Err() == nil:
				l.lastErr = err
				if l.failingSince.IsZero() {
					l.failingSince = now
				}
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// end stops the loop and returns the successful commands and the longest
// failing streak, one still going included.
func (l *loadLoop) end() (int, time.Duration, error) {
	l.stop()
	<-l.done
	if !l.failingSince.IsZero() {
		l.longest = max(l.longest, time.Since(l.failingSince))
	}
	return l.ok, l.longest, l.lastErr
}

// reconnect pings through rdb until a ping works, for 10 s at most, and
// returns the last error.
func reconnect(ctx context.Context, rdb redis.UniversalClient) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := rdb.Ping(c).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond) // between polls, not for a condition
	}
}

// reconnectBound is how long commands may keep failing while the pool
// reconnects: a dial timeout (2 s), with room for a slow machine.
const reconnectBound = 5 * time.Second

// TestRotateTLSAndPassword: a TLS Redis that requires client
// certificates and a password has its client certificate, its CA and its
// password rotated, as cert-manager and a Secret update do it (files
// swapped through ..data, old and new trusted during the switch), while a
// client built by redisx keeps sending commands. After each step every
// connection is killed: the new ones use the new files, no command fails
// for longer than a reconnect, and the expiry gauge follows. In the end
// the server accepts only the new CA's certificates and the new password.
func TestRotateTLSAndPassword(t *testing.T) {
	t.Parallel()
	const hour = time.Hour
	ca1 := redistest.NewCA(t, "CA one", 10*hour)
	server := redistest.NewSecretDir(t)
	srvCert := ca1.Issue(t, true, 10*hour)
	server.Write(t, map[string][]byte{"ca.pem": ca1.PEM, "server.pem": srvCert.PEM, "server-key.pem": srvCert.Key})
	// It expires soon after the test starts, as a certificate does that
	// cert-manager renewed while the binaries ran.
	client1 := ca1.Issue(t, false, 8*time.Second)
	secret := redistest.NewSecretDir(t)
	secret.Write(t, map[string][]byte{"ca.crt": ca1.PEM, "tls.crt": client1.PEM, "tls.key": client1.Key, "password": []byte("password-one\n")})
	srv := redistest.NewTLS(t, &redistest.TLSFiles{CA: server.Path("ca.pem"), ServerCert: server.Path("server.pem"), ServerKey: server.Path("server-key.pem"),
		ClientCert: secret.Path("tls.crt"), ClientKey: secret.Path("tls.key")}, "yes")

	// admin keeps its one connection for the whole test (existing
	// connections survive every rotation; CLIENT KILL skips its caller).
	ctx := context.Background()
	admin := srv.AdminClient(t, ca1)
	do := func(args ...any) {
		t.Helper()
		require.NoError(t, admin.Do(ctx, args...).Err(), args)
	}
	do("CONFIG", "SET", "requirepass", "password-one")

	reg := prometheus.NewRegistry()
	cfg, err := config.ParseWSNode([]string{"--redis", srv.URL(), "--redis-tls-ca", secret.Path("ca.crt"),
		"--redis-tls-cert", secret.Path("tls.crt"), "--redis-tls-key", secret.Path("tls.key"),
		"--redis-password-file", secret.Path("password")}, func(string) (string, bool) { return "", false }, io.Discard)
	require.NoError(t, err)
	cfg.RedisLogger, cfg.RedisRegisterer = logging.TestLogger(t), reg
	rdb, err := redisx.NewClient(cfg.Common)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	require.NoError(t, rdb.Ping(ctx).Err())
	expiry := func(file string) float64 {
		return metricstest.Value(t, reg, "headcount_tls_cert_expiry_timestamp_seconds", "file", file)
	}
	require.EqualValues(t, client1.Cert.NotAfter.Unix(), expiry(secret.Path("tls.crt")))
	require.EqualValues(t, ca1.Cert.NotAfter.Unix(), expiry(secret.Path("ca.crt")))

	load := startLoad(rdb)
	// rotate swaps the client's files, waits until the client has
	// reloaded file, applies the server's side, then kills every
	// connection and waits for a new one to work.
	rotate := func(step string, files map[string][]byte, file string, server ...[]any) {
		t.Helper()
		before := metricstest.Value(t, reg, "headcount_redis_file_reloads_total", "file", file, "result", "ok")
		secret.Write(t, files)
		require.Eventually(t, func() bool {
			return metricstest.Value(t, reg, "headcount_redis_file_reloads_total", "file", file, "result", "ok") > before
		}, 10*time.Second, 20*time.Millisecond, "%s: %s reloaded", step, file)
		for _, cmd := range server {
			do(cmd...)
		}
		if step == "new key pair" { // the scenario found: the old certificate expires
			require.Eventually(t, func() bool { return time.Now().After(client1.Cert.NotAfter.Add(time.Second)) },
				time.Minute, 20*time.Millisecond)
		}
		do("CLIENT", "KILL", "TYPE", "normal")
		require.NoError(t, reconnect(ctx, rdb), "%s: new connections", step)
		t.Logf("%s: new connections work", step)
	}
	pw1 := []byte("password-one\n")

	// 1. A renewal: a new key pair from the same CA.
	client2 := ca1.Issue(t, false, 3*hour)
	rotate("new key pair", map[string][]byte{"ca.crt": ca1.PEM, "tls.crt": client2.PEM, "tls.key": client2.Key, "password": pw1}, secret.Path("tls.crt"))
	require.EqualValues(t, client2.Cert.NotAfter.Unix(), expiry(secret.Path("tls.crt")))

	// 2. A new CA: both trust old and new, the certificates move to the
	// new one, then the old one is dropped on both sides.
	ca2 := redistest.NewCA(t, "CA two", 20*hour)
	bundle := append(append([]byte{}, ca1.PEM...), ca2.PEM...)
	server.Write(t, map[string][]byte{"ca.pem": bundle, "server.pem": srvCert.PEM, "server-key.pem": srvCert.Key})
	do("CONFIG", "SET", "tls-ca-cert-file", server.Path("ca.pem"))
	rotate("CA bundle", map[string][]byte{"ca.crt": bundle, "tls.crt": client2.PEM, "tls.key": client2.Key, "password": pw1}, secret.Path("ca.crt"))
	client3 := ca2.Issue(t, false, 4*hour)
	rotate("client certificate of the new CA", map[string][]byte{"ca.crt": bundle, "tls.crt": client3.PEM, "tls.key": client3.Key, "password": pw1}, secret.Path("tls.crt"))
	srvCert2 := ca2.Issue(t, true, 10*hour)
	server.Write(t, map[string][]byte{"ca.pem": bundle, "server.pem": srvCert2.PEM, "server-key.pem": srvCert2.Key})
	do("CONFIG", "SET", "tls-cert-file", server.Path("server.pem"), "tls-key-file", server.Path("server-key.pem"))
	server.Write(t, map[string][]byte{"ca.pem": ca2.PEM, "server.pem": srvCert2.PEM, "server-key.pem": srvCert2.Key})
	rotate("old CA dropped", map[string][]byte{"ca.crt": ca2.PEM, "tls.crt": client3.PEM, "tls.key": client3.Key, "password": pw1}, secret.Path("ca.crt"),
		[]any{"CONFIG", "SET", "tls-ca-cert-file", server.Path("ca.pem")})
	require.EqualValues(t, ca2.Cert.NotAfter.Unix(), expiry(secret.Path("ca.crt")))
	require.EqualValues(t, client3.Cert.NotAfter.Unix(), expiry(secret.Path("tls.crt")))

	// 3. The password: the new one added, the file rewritten, the old one
	// removed.
	do("ACL", "SETUSER", "default", ">password-two")
	rotate("password", map[string][]byte{"ca.crt": ca2.PEM, "tls.crt": client3.PEM, "tls.key": client3.Key, "password": []byte("password-two\n")}, secret.Path("password"),
		[]any{"ACL", "SETUSER", "default", "<password-one"})

	ok, longest, lastErr := load.end()
	t.Logf("load: %d commands, longest failing streak %v (last error: %v)", ok, longest, lastErr)
	require.Positive(t, ok)
	require.Less(t, longest, reconnectBound, "commands failed for longer than a reconnect: %v", lastErr)

	// A file that fails to load keeps the last good one.
	secret.Write(t, map[string][]byte{"ca.crt": []byte("not a certificate"), "tls.crt": client3.PEM, "tls.key": client3.Key, "password": []byte("password-two")})
	require.Eventually(t, func() bool {
		return metricstest.Value(t, reg, "headcount_redis_file_reloads_total", "file", secret.Path("ca.crt"), "result", "error") == 1
	}, 10*time.Second, 20*time.Millisecond)
	do("CLIENT", "KILL", "TYPE", "normal")
	require.NoError(t, reconnect(ctx, rdb), "the last good CA still in use")
	require.EqualValues(t, ca2.Cert.NotAfter.Unix(), expiry(secret.Path("ca.crt")))
}

// TestSentinelPasswordFileRotates: the sentinels' own password, from
// --redis-sentinel-password-file, rotated as a Secret update does it (the
// new one added on every sentinel, the file swapped, the old one removed)
// while a client built by redisx keeps sending commands. After every
// connection is killed, the client finds the master again through the
// sentinels with the new password: no sentinel logged a failed AUTH and
// commands failed no longer than a reconnect. go-redis alone would keep
// sending the password it started with.
func TestSentinelPasswordFileRotates(t *testing.T) {
	t.Parallel()
	s := redistest.NewSentinels(t, "master-secret-1")
	ctx := context.Background()
	// sentinels runs a command on every sentinel, authenticated with pw.
	sentinels := func(pw string, args ...any) {
		t.Helper()
		for _, sn := range s.Sentinels {
			c := redis.NewClient(&redis.Options{Addr: sn.Addr, Password: pw, Protocol: 2})
			err := c.Do(ctx, args...).Err()
			_ = c.Close()
			require.NoError(t, err, "%s on sentinel %s", args, sn.Addr)
		}
	}
	sentinels("", "ACL", "SETUSER", "default", "resetpass", ">sentinel-one")
	secret := redistest.NewSecretDir(t)
	secret.Write(t, map[string][]byte{"password": []byte("master-secret-1\n"), "sentinel-password": []byte("sentinel-one\n")})

	reg := prometheus.NewRegistry()
	cfg, err := config.ParseWSNode([]string{"--redis-sentinel", s.Addrs(), "--redis-sentinel-master", redistest.SentinelMaster,
		"--redis-password-file", secret.Path("password"), "--redis-sentinel-password-file", secret.Path("sentinel-password")},
		func(string) (string, bool) { return "", false }, io.Discard)
	require.NoError(t, err)
	cfg.RedisLogger, cfg.RedisRegisterer = logging.TestLogger(t), reg
	rdb, err := redisx.NewClient(cfg.Common)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	require.NoError(t, rdb.Ping(ctx).Err())

	load := startLoad(rdb)
	file := secret.Path("sentinel-password")
	sentinels("sentinel-one", "ACL", "SETUSER", "default", ">sentinel-two")
	secret.Write(t, map[string][]byte{"password": []byte("master-secret-1\n"), "sentinel-password": []byte("sentinel-two\n")})
	require.Eventually(t, func() bool {
		return metricstest.Value(t, reg, "headcount_redis_file_reloads_total", "file", file, "result", "ok") == 1
	}, 10*time.Second, 20*time.Millisecond, "the sentinels' password file reloaded")
	sentinels("sentinel-two", "ACL", "SETUSER", "default", "<sentinel-one")
	sentinels("sentinel-two", "ACL", "LOG", "RESET")
	sentinels("sentinel-two", "CLIENT", "KILL", "TYPE", "normal")
	sentinels("sentinel-two", "CLIENT", "KILL", "TYPE", "pubsub")
	master := redis.NewClient(&redis.Options{Addr: s.Master.Addr, Password: s.Password})
	require.NoError(t, master.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err())
	_ = master.Close()
	require.NoError(t, reconnect(ctx, rdb), "new connections after the rotation")

	ok, longest, lastErr := load.end()
	t.Logf("load: %d commands, longest failing streak %v (last error: %v)", ok, longest, lastErr)
	require.Positive(t, ok)
	require.Less(t, longest, reconnectBound, "commands failed for longer than a reconnect: %v", lastErr)
	for _, sn := range s.Sentinels {
		c := redis.NewClient(&redis.Options{Addr: sn.Addr, Password: "sentinel-two", Protocol: 2})
		entries, err := c.Do(ctx, "ACL", "LOG").Slice()
		_ = c.Close()
		require.NoError(t, err)
		require.Empty(t, entries, "sentinel %s refused an AUTH after the rotation", sn.Addr)
	}
}
