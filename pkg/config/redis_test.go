package config

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// TestRedisModes: bare seeds and the URL form both mean Cluster mode, the
// sentinel settings mean Sentinel mode, neither a single server; a
// rediss:// URL or --redis-tls turns TLS on.
func TestRedisModes(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		mode  RedisMode
		seeds []string
		tls   bool
	}{
		{nil, RedisSingle, nil, false},
		{[]string{"--redis", "rediss://cache.example.com:6380/0"}, RedisSingle, nil, true},
		{[]string{"--redis-tls"}, RedisSingle, nil, true},
		{[]string{"--redis", "REDISS://cache.example.com:6380/0"}, RedisSingle, nil, true},
		{[]string{"--redis-cluster", "10.0.0.1:7000, 10.0.0.2:7001"}, RedisCluster, []string{"10.0.0.1:7000", "10.0.0.2:7001"}, false},
		{[]string{"--redis-cluster", "10.0.0.1:7000", "--redis-tls"}, RedisCluster, []string{"10.0.0.1:7000"}, true},
		{[]string{"--redis-cluster", "redis://u:p@h1:7000?addr=h2:7001&addr=h3:7002"}, RedisCluster, []string{"h1:7000", "h2:7001", "h3:7002"}, false},
		{[]string{"--redis-cluster", "rediss://h1:7000?addr=h2:7001"}, RedisCluster, []string{"h1:7000", "h2:7001"}, true},
		{[]string{"--redis-sentinel", "s1:26379,s2:26379", "--redis-sentinel-master", "mymaster"}, RedisSentinel, nil, false},
		{[]string{"--redis-sentinel", "s1:26379", "--redis-sentinel-master", "m", "--redis-tls"}, RedisSentinel, nil, true},
	} {
		c, err := ParseHTTPAPI(tc.args, env(nil), io.Discard)
		require.NoError(t, err, tc.args)
		require.Equal(t, tc.mode, c.RedisMode(), tc.args)
		require.Equal(t, tc.seeds, c.ClusterSeeds(), tc.args)
		require.Equal(t, tc.tls, c.TLSOn(), tc.args)
	}
	c, err := ParseHTTPAPI(nil, env(map[string]string{
		"HEADCOUNT_REDIS_SENTINEL": "s1:26379", "HEADCOUNT_REDIS_SENTINEL_MASTER": "m",
		"HEADCOUNT_REDIS_SENTINEL_PASSWORD": "sp", "HEADCOUNT_REDIS_SENTINEL_USERNAME": "su",
		"HEADCOUNT_REDIS_USERNAME": "u", "HEADCOUNT_REDIS_PASSWORD": "mp",
	}), io.Discard)
	require.NoError(t, err)
	o, err := c.FailoverOptions()
	require.NoError(t, err)
	require.Equal(t, "m", o.MasterName)
	require.Equal(t, []string{"s1:26379"}, o.SentinelAddrs)
	require.Equal(t, "sp", o.SentinelPassword, "the sentinels' own password")
	require.Equal(t, "su", o.SentinelUsername, "the sentinels' own user")
	require.Equal(t, "u", o.Username, "the master's user")
	require.Equal(t, "mp", o.Password, "the master's password")
	require.Nil(t, o.TLSConfig)
}

// TestRedisSettingErrors: every conflict or bad value is refused before
// any dial, naming the settings and what to do.
func TestRedisSettingErrors(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate"), 0o600))
	pwFile, emptyFile := filepath.Join(t.TempDir(), "password"), filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(pwFile, []byte("secret\n"), 0o600))
	require.NoError(t, os.WriteFile(emptyFile, []byte("\n"), 0o600))
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--redis-cluster", "a:1", "--redis-sentinel", "s:2", "--redis-sentinel-master", "m"}, []string{"--redis-cluster, --redis-sentinel: both are set"}},
		{[]string{"--redis", "redis://r:6379", "--redis-cluster", "a:1"}, []string{"--redis: set, but --redis-cluster is too"}},
		{[]string{"--redis", "redis://r:6379", "--redis-sentinel", "s:2", "--redis-sentinel-master", "m"}, []string{"--redis: set, but --redis-sentinel is too"}},
		{[]string{"--redis-sentinel", "s:2"}, []string{"--redis-sentinel-master: empty"}},
		{[]string{"--redis-sentinel", "s", "--redis-sentinel-master", "m"}, []string{"--redis-sentinel: \"s\" is not host:port"}},
		{[]string{"--redis-sentinel-master", "m"}, []string{"--redis-sentinel-master: set without --redis-sentinel"}},
		{[]string{"--redis-sentinel-password", "x"}, []string{"--redis-sentinel-password: set without --redis-sentinel"}},
		{[]string{"--redis-cluster", "http://h:1"}, []string{"--redis-cluster:", "invalid URL scheme"}},
		{[]string{"--redis-cluster", "redis://h:1?addr=nope"}, []string{"--redis-cluster:", "addr"}},
		{[]string{"--redis", "redis://u:p@r:6379", "--redis-password", "q"}, []string{"--redis-password: the Redis URL holds a password too"}},
		{[]string{"--redis-cluster", "redis://u@h:1", "--redis-username", "v"}, []string{"--redis-username: the Redis URL names a user too"}},
		{[]string{"--redis-tls-ca", files.CA}, []string{"--redis-tls-ca: set, but TLS to Redis is off"}},
		{[]string{"--redis-tls", "--redis-tls-ca", "/does/not/exist.pem"}, []string{"--redis-tls-ca:", "no such file"}},
		{[]string{"--redis-tls", "--redis-tls-ca", garbage}, []string{"--redis-tls-ca:", "holds no PEM certificate"}},
		{[]string{"--redis-tls", "--redis-tls-cert", files.ClientCert}, []string{"--redis-tls-cert: set without --redis-tls-key"}},
		{[]string{"--redis-tls", "--redis-tls-key", files.ClientKey}, []string{"--redis-tls-key: set without --redis-tls-cert"}},
		{[]string{"--redis-tls", "--redis-tls-cert", files.ClientCert, "--redis-tls-key", files.ServerKey}, []string{"--redis-tls-cert, --redis-tls-key:", "private key does not match"}},
		{[]string{"--redis-sentinel", "s:1", "--redis-sentinel-master", "m", "--redis-tls", "--redis-tls-ca", garbage}, []string{"--redis-tls-ca:"}},
		{[]string{"--redis-password-file", "/does/not/exist"}, []string{"--redis-password-file:", "no such file"}},
		{[]string{"--redis-password-file", emptyFile}, []string{"--redis-password-file:", "is empty"}},
		{[]string{"--redis-password-file", pwFile, "--redis-password", "q"}, []string{"--redis-password-file: a password is given too"}},
		{[]string{"--redis-password-file", pwFile, "--redis", "redis://:p@r:6379"}, []string{"--redis-password-file: a password is given too"}},
		{[]string{"--redis-password-file", pwFile, "--redis-sentinel", "s:1", "--redis-sentinel-master", "m", "--redis-password", "q"}, []string{"--redis-password-file: a password is given too"}},
		{[]string{"--redis-sentinel-password-file", pwFile}, []string{"--redis-sentinel-password-file: set without --redis-sentinel"}},
		{[]string{"--redis-sentinel-password-file", emptyFile, "--redis-sentinel", "s:1", "--redis-sentinel-master", "m"}, []string{"--redis-sentinel-password-file:", "is empty"}},
		{[]string{"--redis-sentinel-password-file", pwFile, "--redis-sentinel", "s:1", "--redis-sentinel-master", "m", "--redis-sentinel-password", "q"}, []string{"--redis-sentinel-password-file: --redis-sentinel-password is set too"}},
		// Every problem at once, not the first.
		{[]string{"--redis-cluster", "rediss://h:x", "--redis-tls-ca", garbage, "--redis-sentinel-master", "m"},
			[]string{"--redis-cluster:", "--redis-tls-ca:", "--redis-sentinel-master:"}},
	} {
		_, err := ParseWSNode(tc.args, env(nil), io.Discard)
		for _, w := range tc.want {
			require.ErrorContains(t, err, w, tc.args)
		}
	}
	// Valid files pass, for every mode.
	for _, args := range [][]string{
		{"--redis", "rediss://r:6380", "--redis-tls-ca", files.CA, "--redis-tls-cert", files.ClientCert, "--redis-tls-key", files.ClientKey},
		{"--redis-cluster", "rediss://h:1", "--redis-tls-ca", files.CA},
		{"--redis-sentinel", "s:1", "--redis-sentinel-master", "m", "--redis-tls", "--redis-tls-ca", files.CA},
		{"--redis", "rediss://u@r:6380", "--redis-password-file", pwFile, "--redis-tls-ca", files.CA},
	} {
		c, err := ParseWSNode(args, env(nil), io.Discard)
		require.NoError(t, err, args)
		require.True(t, c.TLSOn())
	}
}

// TestRedisPasswordsNeverShown: a password, in a URL or a setting of its
// own, from the environment or a flag, appears in no error message, no
// usage text and no RedisTarget.
func TestRedisPasswordsNeverShown(t *testing.T) {
	const pw = "hunter2-secret"
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--redis", "redis://u:" + pw + "@r:notaport/0"}, nil},
		{[]string{"--redis", "redis://u:" + pw + "@r:6379/0?password=" + pw + "&nope=1"}, nil},
		{[]string{"--redis", "redis://u:" + pw + "@r:6379/0", "--redis-password", "other"}, nil},
		{[]string{"--redis-cluster", "redis://u:" + pw + "@h:1?addr=bad"}, nil},
		{[]string{"--redis-cluster", "redis://u:" + pw + "@h:x"}, nil},
		{[]string{"--redis-cluster", "ftp://u:" + pw + "@h:1"}, nil},
		{[]string{"--redis", "redis://u:" + pw + "/x@h:6379/0"}, nil},
		{[]string{"--no-such-flag"}, map[string]string{"HEADCOUNT_REDIS": "redis://u:" + pw + "@r:6379/0"}},
		{[]string{"--no-such-flag"}, map[string]string{"HEADCOUNT_REDIS_CLUSTER": "rediss://u:" + pw + "@h:1"}},
		{[]string{"--no-such-flag"}, map[string]string{"HEADCOUNT_REDIS_PASSWORD": pw, "HEADCOUNT_REDIS_SENTINEL_PASSWORD": pw}},
		{[]string{"-h"}, map[string]string{"HEADCOUNT_REDIS_PASSWORD": pw, "HEADCOUNT_REDIS": "redis://:" + pw + "@r:6379"}},
	} {
		var out bytes.Buffer
		c, err := ParseWSNode(tc.args, env(tc.env), &out)
		require.Error(t, err, tc.args)
		require.NotContains(t, err.Error(), pw, tc.args)
		require.NotContains(t, out.String(), pw, tc.args)
		require.NotContains(t, c.RedisTarget(), pw, tc.args)
	}
	c, err := ParseWSNode([]string{"--redis-cluster", "rediss://u:" + pw + "@h1:7000?addr=h2:7001"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "cluster rediss://u:xxxxx@h1:7000?addr=h2:7001 over TLS", c.RedisTarget())
	require.Equal(t, "redis://u:xxxxx@h", Redact("redis://u:"+pw+"@h"))
	require.Equal(t, "a:1,b:2", Redact("a:1,b:2"))
	require.Equal(t, "redis://xxxxx@h:bad port", Redact("redis://u:"+pw+"@h:bad port"))
	require.Equal(t, "redis://xxxxx@h:6379", Redact("redis://u:"+pw+"/x@y@h:6379"), "an unescaped / and @ in the password")
}
