package appsdb_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/appsdb"
)

func TestNew(t *testing.T) {
	t.Parallel()
	ok := []struct{ url, table, str string }{
		{"postgres://u:pw@db:5433/soketi", "", "postgres apps table apps at db:5433/soketi"},
		{"postgresql://u:pw@db/soketi?sslmode=require", "public.apps", "postgres apps table public.apps at db:5432/soketi"},
		{"mysql://u:pw@db:3307/main", "soketi_apps", "mysql apps table soketi_apps at db:3307/main"},
		{"mysql://u:pw@db/main?tls=skip-verify", "main.Apps_2", "mysql apps table main.Apps_2 at db:3306/main"},
		{"mysql://u@[::1]:3306/main", "", "mysql apps table apps at [::1]:3306/main"},
	}
	for _, c := range ok {
		s, err := appsdb.New(appsdb.Config{URL: c.url, Table: c.table})
		require.NoError(t, err, c.url)
		require.Equal(t, c.str, s.String())
		require.NoError(t, s.Close())
	}
	bad := []struct{ url, table, msg string }{
		{"redis://u:pw@db/0", "", `scheme "redis"`},
		{"mysql://u:pw@db:99999/main", "", "not a port number"},
		{"mysql://u:pw@db:3306/", "", "needs a database"},
		{"mysql://u:pw@/main", "", "needs a host"},
		{"mysql://u:pw@db/main?nosuchparam=1&tls=bogus", "", "apps db URL"},
		{"postgres://u:pw@db:notaport/x", "", "apps db URL"},
		{"postgres://u:pw@db/x", "apps; DROP TABLE apps", "apps table"},
		{"postgres://u:pw@db/x", `a"b`, "apps table"},
		{"postgres://u:pw@db/x", "a.b.c", "at most one dot"},
		{"postgres://u:pw@db/x", "1apps", "apps table"},
		{"postgres://u:pw@db/x", "." + strings.Repeat("a", 10), "apps table"},
		{"postgres://u:pw@db/x", strings.Repeat("a", 64), "apps table"},
		{"", "", "scheme"},
	}
	for _, c := range bad {
		_, err := appsdb.New(appsdb.Config{URL: c.url, Table: c.table})
		require.ErrorContains(t, err, c.msg, c.url+" "+c.table)
		require.NotContains(t, err.Error(), ":pw@", "the URL, password and all, is not quoted")
	}
	_, err := appsdb.New(appsdb.Config{URL: "postgres://u:pw@db/x", Timeout: -time.Second})
	require.ErrorContains(t, err, "timeout")
}

// TestLoadTimeout: a database that accepts connections but never answers
// holds Load no longer than the Timeout, and the error does not quote
// the password.
func TestLoadTimeout(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for _, scheme := range []string{"postgres", "mysql"} {
		// The user is the password, which pgx's error quotes as the user:
		// the password must still not appear.
		s, err := appsdb.New(appsdb.Config{URL: scheme + "://secretpw:secretpw@" + ln.Addr().String() + "/main", Timeout: 500 * time.Millisecond})
		require.NoError(t, err)
		start := time.Now()
		_, err = s.Load(context.Background())
		require.Error(t, err, scheme)
		require.NotContains(t, err.Error(), "secretpw")
		require.ErrorIs(t, err, context.DeadlineExceeded, scheme)
		require.Less(t, time.Since(start), 3*time.Second, scheme)
		require.NoError(t, s.Close())
	}
}

func TestFromSoketiEnv(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, driver := range []string{"", "array"} {
		cfg, ok, err := appsdb.FromSoketiEnv(env("SOKETI_APP_MANAGER_DRIVER", driver, "SOKETI_DB_POSTGRES_HOST", "db"))
		require.NoError(t, err)
		require.False(t, ok)
		require.Zero(t, cfg)
	}
	_, ok, err := appsdb.FromSoketiEnv(env("SOKETI_APP_MANAGER_DRIVER", "dynamodb"))
	require.False(t, ok)
	require.ErrorContains(t, err, "SOKETI_APP_MANAGER_DRIVER")

	// soketi's defaults.
	cfg, ok, err := appsdb.FromSoketiEnv(env("SOKETI_APP_MANAGER_DRIVER", "postgres"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, appsdb.Config{URL: "postgres://postgres:password@127.0.0.1:5432/main", Table: "apps"}, cfg)
	cfg, _, err = appsdb.FromSoketiEnv(env("SOKETI_APP_MANAGER_DRIVER", "mysql", "SOKETI_DB_POSTGRES_HOST", "elsewhere"))
	require.NoError(t, err)
	require.Equal(t, appsdb.Config{URL: "mysql://root:password@127.0.0.1:3306/main", Table: "apps"}, cfg)

	cfg, _, err = appsdb.FromSoketiEnv(env(
		"SOKETI_APP_MANAGER_DRIVER", "mysql",
		"SOKETI_DB_MYSQL_HOST", "mysql.internal", "SOKETI_DB_MYSQL_PORT", "3307",
		"SOKETI_DB_MYSQL_USERNAME", "soketi", "SOKETI_DB_MYSQL_PASSWORD", "p@ss:w/rd?",
		"SOKETI_DB_MYSQL_DATABASE", "realtime", "SOKETI_APP_MANAGER_MYSQL_TABLE", "soketi_apps",
		"SOKETI_DB_POSTGRES_PASSWORD", "not this one", "SOKETI_APP_MANAGER_POSTGRES_TABLE", "nor_this",
	))
	require.NoError(t, err)
	require.Equal(t, "soketi_apps", cfg.Table)
	s, err := appsdb.New(cfg)
	require.NoError(t, err)
	require.Equal(t, "mysql apps table soketi_apps at mysql.internal:3307/realtime", s.String())
	require.NoError(t, s.Close())

	cfg, _, err = appsdb.FromSoketiEnv(env("SOKETI_APP_MANAGER_DRIVER", "postgres", "SOKETI_DB_POSTGRES_HOST", "", "SOKETI_DB_POSTGRES_PASSWORD", "x y%z"))
	require.NoError(t, err)
	require.Equal(t, "postgres://postgres:x%20y%25z@127.0.0.1:5432/main", cfg.URL, "an empty variable is unset, as in soketi; the password is escaped")

	_, _, err = appsdb.FromSoketiEnv(env("SOKETI_APP_MANAGER_DRIVER", "postgres", "SOKETI_DB_POSTGRES_PORT", "x", "SOKETI_DB_POSTGRES_PASSWORD", "hunter2"))
	require.ErrorContains(t, err, "SOKETI_DB_POSTGRES_PORT")
	_, _, err = appsdb.FromSoketiEnv(env("SOKETI_APP_MANAGER_DRIVER", "postgres", "SOKETI_APP_MANAGER_POSTGRES_TABLE", "x;y", "SOKETI_DB_POSTGRES_PASSWORD", "hunter2"))
	require.ErrorContains(t, err, "apps table")
	require.NotContains(t, err.Error(), "hunter2")

	require.Equal(t, []string{
		"SOKETI_APP_MANAGER_CACHE_TTL is ignored: headcount holds every app in memory and reloads the whole table periodically",
		"SOKETI_DB_POOLING_MAX is ignored: headcount uses at most 2 connections, for the periodic reload",
	}, appsdb.SoketiEnvIgnored(env("SOKETI_APP_MANAGER_CACHE_TTL", "60", "SOKETI_DB_POOLING_MAX", "7", "SOKETI_DB_POOLING_MIN", "")))
}

// FuzzNew: New never panics, never dials (a fuzzed host would be looked
// up), and its error and String never hold the URL's password.
func FuzzNew(f *testing.F) {
	for _, s := range []string{
		"postgres://u:pw@db:5432/main", "postgresql://u:pw@db/main?sslmode=disable&connect_timeout=3",
		"mysql://u:pw@db:3306/main", "mysql://u:pw@db/main?tls=true", "mysql://u:pw@[::1]/x",
		"postgres://u:pw@/main?host=/tmp", "mysql://u:pw@db:0/main", "postgres:///x", "mysql:opaque",
	} {
		f.Add(s, "apps")
	}
	f.Add("postgres://u:pw@db/x", "public.apps")
	f.Add("postgres://u:pw@db/x", "a`b")
	f.Fuzz(func(t *testing.T, raw, table string) {
		// The password, when it appears nowhere else in the URL.
		pw := ""
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			if p, _ := u.User.Password(); len(p) >= 4 && strings.Count(raw, p) == 1 {
				pw = p
			}
		}
		s, err := appsdb.New(appsdb.Config{URL: raw, Table: table})
		if err != nil {
			if pw != "" && strings.Contains(err.Error(), pw) {
				t.Fatalf("error holds the password %q: %v", pw, err)
			}
			return
		}
		defer s.Close()
		for _, c := range table {
			if c != '_' && c != '.' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
				t.Fatalf("table %q accepted", table)
			}
		}
		if pw != "" && strings.Contains(s.String(), pw) {
			t.Fatalf("String %q holds the password %q", s.String(), pw)
		}
	})
}
