package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisMode is how the binaries reach Redis: exactly one of a single
// server, a Redis Cluster or a master found through Redis Sentinel.
type RedisMode int

// The Redis modes; Common.RedisMode says which one a configuration uses.
const (
	// RedisSingle is one server at --redis (the default).
	RedisSingle RedisMode = iota
	// RedisCluster is a Redis Cluster from --redis-cluster seeds.
	RedisCluster
	// RedisSentinel is the master named --redis-sentinel-master, found by
	// asking the sentinels of --redis-sentinel.
	RedisSentinel
)

// String names the mode as its flag does: single, cluster or sentinel.
func (m RedisMode) String() string {
	switch m {
	case RedisCluster:
		return "cluster"
	case RedisSentinel:
		return "sentinel"
	default:
		return "single"
	}
}

// RedisMode returns the mode the settings select: Sentinel when
// RedisSentinel is set, Cluster when RedisCluster is, else a single server.
// Validation refuses both at once.
func (c Common) RedisMode() RedisMode {
	switch {
	case strings.TrimSpace(c.RedisSentinel) != "":
		return RedisSentinel
	case strings.TrimSpace(c.RedisCluster) != "":
		return RedisCluster
	default:
		return RedisSingle
	}
}

// clusterURL reports whether --redis-cluster is in its URL form.
func (c Common) clusterURL() bool { return strings.Contains(c.RedisCluster, "://") }

// ClusterOptions returns the Redis Cluster options of --redis-cluster, bare
// seeds or a URL (go-redis's redis.ParseClusterURL: credentials, TLS with
// rediss://, more seeds as addr= parameters), with --redis-username,
// --redis-password and --redis-tls applied. Timeouts, the TLS files and
// --redis-password-file are left to the caller (redisx re-reads them).
func (c Common) ClusterOptions() (*redis.ClusterOptions, error) {
	o := &redis.ClusterOptions{}
	if c.clusterURL() {
		u := strings.TrimSpace(c.RedisCluster)
		var err error
		if o, err = redis.ParseClusterURL(u); err != nil {
			return nil, fmt.Errorf("%s: %w", Redact(u), unwrapURL(err))
		}
	} else {
		o.Addrs = c.ClusterSeeds()
	}
	var err error
	o.Username, o.Password, err = c.credentials(o.Username, o.Password)
	if err != nil {
		return nil, err
	}
	o.TLSConfig = c.tlsConfig(o.TLSConfig, o.TLSConfig != nil)
	return o, nil
}

// SingleOptions returns the options of the single server at --redis
// (redis.ParseURL: rediss:// for TLS), with --redis-username,
// --redis-password and --redis-tls applied, as ClusterOptions.
func (c Common) SingleOptions() (*redis.Options, error) {
	o, err := redis.ParseURL(c.Redis)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Redact(c.Redis), unwrapURL(err))
	}
	if o.Username, o.Password, err = c.credentials(o.Username, o.Password); err != nil {
		return nil, err
	}
	o.TLSConfig = c.tlsConfig(o.TLSConfig, o.TLSConfig != nil)
	return o, nil
}

// FailoverOptions returns the Sentinel options: the master name, the
// sentinels' addresses and password, and for the master --redis-username,
// --redis-password and --redis-tls (go-redis uses one TLS configuration
// for the sentinels and the master), as ClusterOptions.
func (c Common) FailoverOptions() (*redis.FailoverOptions, error) {
	o := &redis.FailoverOptions{
		MasterName:       strings.TrimSpace(c.RedisSentinelMaster),
		SentinelAddrs:    splitList(c.RedisSentinel),
		SentinelPassword: c.RedisSentinelPassword,
		SentinelUsername: c.RedisSentinelUsername,
		Username:         c.RedisUsername,
		Password:         c.RedisPassword,
	}
	o.TLSConfig = c.tlsConfig(nil, false)
	return o, nil
}

// credentials merges a URL's user and password with --redis-username and
// --redis-password: either may give them, not both; a password file
// excludes both passwords.
func (c Common) credentials(user, pass string) (string, string, error) {
	var errs []error
	if c.RedisUsername != "" {
		if user != "" {
			errs = append(errs, errors.New("--redis-username: the Redis URL names a user too: give it in one place"))
		}
		user = c.RedisUsername
	}
	if c.RedisPassword != "" {
		if pass != "" {
			errs = append(errs, errors.New("--redis-password: the Redis URL holds a password too: give it in one place (--redis-password keeps it out of the URL)"))
		}
		pass = c.RedisPassword
	}
	if c.RedisPasswordFile != "" && pass != "" {
		errs = append(errs, errors.New("--redis-password-file: a password is given too (--redis-password or the Redis URL): give it in one place"))
	}
	return user, pass, errors.Join(errs...)
}

// TLSOn reports whether the binaries talk TLS to Redis: --redis-tls, or a
// rediss:// URL in the selected mode.
func (c Common) TLSOn() bool {
	if c.RedisTLS {
		return true
	}
	switch c.RedisMode() {
	case RedisCluster:
		return c.clusterURL() && tlsURL(c.RedisCluster)
	case RedisSingle:
		return tlsURL(c.Redis)
	}
	return false
}

// tlsURL reports whether s is a rediss:// URL (the scheme in any case, as
// go-redis reads it).
func tlsURL(s string) bool {
	u, err := url.Parse(strings.TrimSpace(s))
	return err == nil && u.Scheme == "rediss"
}

// tlsConfig returns base (a URL's TLS configuration, or a new one), or nil
// when TLS is off. fromURL says the URL asked for TLS itself. The CA and
// client certificate are not in it: redisx loads them for each new
// connection, so renewed files need no restart.
func (c Common) tlsConfig(base *tls.Config, fromURL bool) *tls.Config {
	if !c.RedisTLS && !fromURL {
		return nil
	}
	cfg := base
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.MinVersion = tls.VersionTLS12
	return cfg
}

// validateRedis checks the Redis settings of every mode, dialing nothing:
// one mode at a time, addresses, URLs, credentials given once, and TLS
// files that exist and parse.
func validateRedis(c *Common) []error {
	var errs []error
	mode := c.RedisMode()
	if mode == RedisSentinel && strings.TrimSpace(c.RedisCluster) != "" {
		errs = append(errs, errors.New("--redis-cluster, --redis-sentinel: both are set: choose one (Cluster seeds, or the sentinels of a master)"))
	}
	if mode != RedisSingle && c.redisExplicit {
		errs = append(errs, fmt.Errorf("--redis: set, but --redis-%s is too: --redis names a single server; unset one of them", mode))
	}
	switch mode {
	case RedisSingle:
		if _, err := redis.ParseURL(c.Redis); err != nil {
			errs = append(errs, fmt.Errorf("--redis: %q: %w (want redis://[user:password@]host:port[/db], or rediss:// for TLS%s)", Redact(c.Redis), unwrapURL(err), schemeHint(c.Redis)))
		}
	case RedisCluster:
		if c.clusterURL() {
			u := strings.TrimSpace(c.RedisCluster)
			if _, err := redis.ParseClusterURL(u); err != nil {
				errs = append(errs, fmt.Errorf("--redis-cluster: %q: %w (want host:port,host:port or redis[s]://[user:password@]host:port?addr=host:port&addr=...)", Redact(u), unwrapURL(err)))
			}
		} else {
			for _, seed := range c.ClusterSeeds() {
				if err := checkAddr("--redis-cluster", seed, true); err != nil {
					errs = append(errs, err)
				}
			}
		}
	case RedisSentinel:
		for _, a := range splitList(c.RedisSentinel) {
			if err := checkAddr("--redis-sentinel", a, true); err != nil {
				errs = append(errs, err)
			}
		}
		if strings.TrimSpace(c.RedisSentinelMaster) == "" {
			errs = append(errs, errors.New("--redis-sentinel-master: empty: with --redis-sentinel, name the master the sentinels monitor (e.g. mymaster)"))
		}
	}
	if mode != RedisSentinel {
		if c.RedisSentinelMaster != "" {
			errs = append(errs, errors.New("--redis-sentinel-master: set without --redis-sentinel: give the sentinels' addresses too"))
		}
		if c.RedisSentinelPassword != "" {
			errs = append(errs, errors.New("--redis-sentinel-password: set without --redis-sentinel"))
		}
		if c.RedisSentinelPasswordFile != "" {
			errs = append(errs, errors.New("--redis-sentinel-password-file: set without --redis-sentinel"))
		}
	}
	if !c.TLSOn() {
		for _, f := range []struct{ name, v string }{{"--redis-tls-ca", c.RedisTLSCA}, {"--redis-tls-cert", c.RedisTLSCert}, {"--redis-tls-key", c.RedisTLSKey}} {
			if f.v != "" {
				errs = append(errs, fmt.Errorf("%s: set, but TLS to Redis is off: use a rediss:// URL or --redis-tls", f.name))
			}
		}
	}
	if c.TLSOn() {
		errs = append(errs, c.checkTLSFiles()...)
	}
	if c.RedisPasswordFile != "" {
		if _, err := ReadRedisPassword(c.RedisPasswordFile); err != nil {
			errs = append(errs, fmt.Errorf("--redis-password-file: %w", err))
		}
	}
	if c.RedisSentinelPasswordFile != "" {
		if c.RedisSentinelPassword != "" {
			errs = append(errs, errors.New("--redis-sentinel-password-file: --redis-sentinel-password is set too: give the password in one place"))
		}
		if _, err := ReadRedisPassword(c.RedisSentinelPasswordFile); err != nil {
			errs = append(errs, fmt.Errorf("--redis-sentinel-password-file: %w", err))
		}
	}
	// Credentials given both in a URL and by the settings.
	var user, pass string
	switch {
	case mode == RedisSingle:
		if o, err := redis.ParseURL(c.Redis); err == nil {
			user, pass = o.Username, o.Password
		}
	case mode == RedisCluster && c.clusterURL():
		if o, err := redis.ParseClusterURL(strings.TrimSpace(c.RedisCluster)); err == nil {
			user, pass = o.Username, o.Password
		}
	}
	if _, _, err := c.credentials(user, pass); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// schemeHint suggests the URL meant when --redis is a bare host:port, the
// form other tools take: "; did you mean redis://localhost:6379?".
func schemeHint(s string) string {
	if strings.Contains(s, "://") || strings.Contains(s, "@") {
		return "" // a scheme of its own, or a password not to repeat
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return ""
	}
	return "; did you mean redis://" + s + "?"
}

// splitList returns the non-empty, trimmed items of a comma-separated list.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// unwrapURL drops the URL that net/url quotes in its parse errors: it may
// hold a password. When the URL has a user part, net/url's own message may
// quote a piece of the password too (as a port, say), so it is replaced.
func unwrapURL(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	if strings.Contains(ue.URL, "@") {
		return errors.New("not a valid URL (percent-encode characters such as / @ : # ? in the user and password)")
	}
	return ue.Err
}

// userinfo matches everything between a URL's scheme and its last @: the
// user and password, where net/url cannot parse the URL (a password with
// an unescaped / or @ is one reason).
var userinfo = regexp.MustCompile(`://.*@`)

// Redact returns s with the password of a URL in it replaced by xxxxx (and
// a password= parameter too), for logs and error messages. Other strings
// come back unchanged.
func Redact(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	if u, err := url.Parse(s); err == nil {
		if q := u.Query(); q.Has("password") || q.Has("sentinel_password") {
			for _, k := range []string{"password", "sentinel_password"} {
				if q.Has(k) {
					q.Set(k, "xxxxx")
				}
			}
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	return userinfo.ReplaceAllString(s, "://xxxxx@")
}

// RedisTarget describes where the binaries find Redis, for logs: the mode
// and its addresses, never a password.
func (c Common) RedisTarget() string {
	tls := ""
	if c.TLSOn() {
		tls = " over TLS"
	}
	switch c.RedisMode() {
	case RedisCluster:
		return "cluster " + Redact(strings.TrimSpace(c.RedisCluster)) + tls
	case RedisSentinel:
		return fmt.Sprintf("sentinel master %s via %s%s", c.RedisSentinelMaster, strings.Join(splitList(c.RedisSentinel), ","), tls)
	default:
		return "single " + Redact(c.Redis) + tls
	}
}
