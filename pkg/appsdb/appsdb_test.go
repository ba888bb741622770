package appsdb_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/dbtest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/appsdb"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// dialect is one kind of database under test.
type dialect struct {
	name  string
	start func(testing.TB) *dbtest.Server
	// schema is soketi 1.6.1's tests/fixtures/<schema>_schema.sql,
	// unchanged: its CREATE TABLE and the row it inserts.
	schema string
	// text turns the webhooks column into text, which holds any string.
	text string
	// quote quotes an identifier.
	quote func(string) string
}

var dialects = []dialect{
	{
		name: "postgres", start: dbtest.NewPostgres, schema: "testdata/soketi-postgres.sql",
		text:  `ALTER TABLE %s ALTER COLUMN webhooks TYPE text`,
		quote: func(s string) string { return `"` + s + `"` },
	},
	{
		name: "mariadb", start: dbtest.NewMariaDB, schema: "testdata/soketi-mysql.sql",
		text:  "ALTER TABLE %s MODIFY webhooks text",
		quote: func(s string) string { return "`" + s + "`" },
	},
}

// db is a server of a dialect, shared by a test's subtests.
type db struct {
	dialect
	srv *dbtest.Server
	n   atomic.Int32
}

func forEachDialect(t *testing.T, f func(t *testing.T, d *db)) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			f(t, &db{dialect: d, srv: d.start(t)})
		})
	}
}

// exec runs statements, failing the test.
func (d *db) exec(t testing.TB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		_, err := d.srv.DB.Exec(s)
		require.NoError(t, err, s)
	}
}

// soketiTable creates a new table as soketi's fixture does, with its
// row, and returns its name.
func (d *db) soketiTable(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("apps%d", d.n.Add(1))
	b, err := os.ReadFile(d.schema)
	require.NoError(t, err)
	sql := strings.NewReplacer("`apps`", d.quote(name), "EXISTS apps", "EXISTS "+name, "INTO apps", "INTO "+name).Replace(string(b))
	d.srv.Exec(t, sql)
	return name
}

// source opens a Source on table.
func (d *db) source(t testing.TB, table string) *appsdb.Source {
	t.Helper()
	s, err := appsdb.New(appsdb.Config{URL: d.srv.URL, Table: table, Timeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func load(t testing.TB, s *appsdb.Source) *apps.Registry {
	t.Helper()
	r, err := s.Load(context.Background())
	require.NoError(t, err)
	return r
}

// TestLoadSoketiFixture: soketi's own table and row load as soketi reads
// them.
func TestLoadSoketiFixture(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d *db) {
		table := d.soketiTable(t)
		r := load(t, d.source(t, table))
		require.Len(t, r.All(), 1)
		a := r.ByKey("app-key")
		require.NotNil(t, a)
		want := &apps.App{
			ID: "app-id", Key: "app-key", Secret: "app-secret", Enabled: true,
			MaxConnections: 200, EnableClientMessages: true,
			MaxBackendEventsPerSecond: -1, MaxClientEventsPerSecond: -1, MaxReadRequestsPerSecond: -1,
			Webhooks: []apps.Webhook{},
		}
		require.Equal(t, want, a)
		require.Empty(t, r.Warnings())
	})
}

// TestLoadColumns: every column of soketi's table reaches its field.
func TestLoadColumns(t *testing.T) {
	t.Parallel()
	cases := []struct {
		column, value string
		got           func(*apps.App) any
		want          any
		warning       string
	}{
		{"`key`", "'other-key'", func(a *apps.App) any { return a.Key }, "other-key", ""},
		{"secret", "'other-secret'", func(a *apps.App) any { return a.Secret }, "other-secret", ""},
		{"max_connections", "7", func(a *apps.App) any { return a.MaxConnections }, 7, ""},
		{"enabled", "0", func(a *apps.App) any { return a.Enabled }, false, ""},
		{"enable_client_messages", "0", func(a *apps.App) any { return a.EnableClientMessages }, false, ""},
		{"max_backend_events_per_sec", "11", func(a *apps.App) any { return a.MaxBackendEventsPerSecond }, 11, ""},
		{"max_client_events_per_sec", "12", func(a *apps.App) any { return a.MaxClientEventsPerSecond }, 12, ""},
		{"max_read_req_per_sec", "13", func(a *apps.App) any { return a.MaxReadRequestsPerSecond }, 13, ""},
		{
			"webhooks", `'[{"url":"http://127.0.0.1:9/hook","event_types":["channel_occupied"],"filter":{"channel_name_starts_with":"x-"}}]'`,
			func(a *apps.App) any { return a.Webhooks },
			[]apps.Webhook{{URL: "http://127.0.0.1:9/hook", EventTypes: []string{"channel_occupied"}, Filter: apps.WebhookFilter{ChannelNameStartsWith: "x-"}}}, "",
		},
		{"max_presence_members_per_channel", "50", func(a *apps.App) any { return a.MaxPresenceMembersPerChannel }, 50, ""},
		{"max_presence_member_size_in_kb", "2", func(a *apps.App) any { return a.MaxPresenceMemberSizeInKb }, 2.0, ""},
		{"max_channel_name_length", "100", func(a *apps.App) any { return a.MaxChannelNameLength }, 100, ""},
		{"max_event_channels_at_once", "5", func(a *apps.App) any { return a.MaxEventChannelsAtOnce }, 5, ""},
		{"max_event_name_length", "60", nil, nil, `app "app-id": field maxEventNameLength is a soketi setting headcount does not implement; it is ignored`},
		{"max_event_payload_in_kb", "20", func(a *apps.App) any { return a.MaxEventPayloadInKb }, 20.0, ""},
		{"max_event_batch_size", "3", func(a *apps.App) any { return a.MaxEventBatchSize }, 3, ""},
		{"enable_user_authentication", "1", func(a *apps.App) any { return a.EnableUserAuthentication }, true, ""},
	}
	forEachDialect(t, func(t *testing.T, d *db) {
		for _, c := range cases {
			t.Run(c.column, func(t *testing.T) {
				table := d.soketiTable(t)
				col := c.column
				if d.name == "postgres" {
					col = strings.ReplaceAll(col, "`", `"`)
				}
				d.exec(t, fmt.Sprintf("UPDATE %s SET %s = %s", table, col, c.value))
				r := load(t, d.source(t, table))
				a := r.ByID("app-id")
				require.NotNil(t, a)
				if c.got != nil {
					require.Equal(t, c.want, c.got(a))
				}
				if c.warning != "" {
					require.Equal(t, []string{c.warning}, r.Warnings())
				} else {
					require.Empty(t, r.Warnings())
				}
			})
		}
	})
}

// TestLoadRows: several apps, a disabled one, NULLs and soketi's other
// spellings of empty, and columns nobody reads.
func TestLoadRows(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d *db) {
		table := d.soketiTable(t)
		key := d.quote("key")
		d.exec(t,
			fmt.Sprintf(`INSERT INTO %s (id, %s, secret, max_connections, enabled, enable_client_messages, max_backend_events_per_sec,
				max_client_events_per_sec, max_read_req_per_sec, webhooks, enable_user_authentication)
				VALUES ('off', 'off-key', 'off-secret', -1, 0, 0, -1, -1, -1, NULL, 0)`, table, key),
			fmt.Sprintf(`INSERT INTO %s (id, %s, secret, max_connections, enabled, enable_client_messages, max_backend_events_per_sec,
				max_client_events_per_sec, max_read_req_per_sec, webhooks, max_presence_members_per_channel, enable_user_authentication)
				VALUES ('2', '2-key', '2-secret', 0, 1, 1, 0, 0, 0, '[]', NULL, 1)`, table, key),
			fmt.Sprintf("ALTER TABLE %s ADD COLUMN created_at varchar(40) DEFAULT 'yesterday'", table),
		)
		var logs strings.Builder
		s, err := appsdb.New(appsdb.Config{URL: d.srv.URL, Table: table, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
		require.NoError(t, err)
		defer s.Close()
		r := load(t, s)
		require.Len(t, r.All(), 3)
		off := r.ByKey("off-key")
		require.NotNil(t, off)
		require.False(t, off.Enabled)
		require.Equal(t, -1, off.MaxConnections)
		require.Nil(t, off.Webhooks)
		two := r.ByID("2")
		require.True(t, two.Enabled)
		require.True(t, two.EnableUserAuthentication)
		require.Zero(t, two.MaxPresenceMembersPerChannel)
		require.Contains(t, logs.String(), "columns=created_at")
		require.Equal(t, 1, strings.Count(logs.String(), "ignored"), "the ignored columns are named once, not at each Load")
		_, err = s.Load(context.Background())
		require.ErrorIs(t, err, apps.ErrUnchanged)
		require.Equal(t, 1, strings.Count(logs.String(), "ignored"))
	})
}

// TestLoadErrors: what Load refuses, and that it says what and where,
// without the password.
func TestLoadErrors(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	forEachDialect(t, func(t *testing.T, d *db) {
		// loadErr returns Load's error, checking whether it is an
		// UnavailableError (naming the source) or one about the apps.
		loadErr := func(t *testing.T, s *appsdb.Source, unavailable bool) string {
			t.Helper()
			r, err := s.Load(context.Background())
			require.Error(t, err)
			require.Nil(t, r)
			require.NotContains(t, err.Error(), dbtest.Password)
			var u *apps.UnavailableError
			require.Equal(t, unavailable, errors.As(err, &u), "%v", err)
			if unavailable {
				require.Contains(t, err.Error(), s.String())
			}
			return err.Error()
		}
		t.Run("bad webhooks JSON", func(t *testing.T) {
			table := d.soketiTable(t)
			d.exec(t, fmt.Sprintf(d.text, table),
				fmt.Sprintf(`UPDATE %s SET webhooks = '[{"url": "http://x/"' WHERE id = 'app-id'`, table))
			msg := loadErr(t, d.source(t, table), false)
			require.Contains(t, msg, `app "app-id": column webhooks: not valid JSON`)
		})
		t.Run("invalid app", func(t *testing.T) {
			table := d.soketiTable(t)
			d.exec(t, fmt.Sprintf(`UPDATE %s SET webhooks = '[{"url": "http://x/", "event_types": ["nope"]}]'`, table))
			require.Contains(t, loadErr(t, d.source(t, table), false), `"nope" is not an event type`)
		})
		t.Run("duplicate key", func(t *testing.T) {
			table := d.soketiTable(t)
			d.exec(t, fmt.Sprintf(`INSERT INTO %s (id, %s, secret, max_connections, enabled, enable_client_messages, max_backend_events_per_sec,
				max_client_events_per_sec, max_read_req_per_sec, enable_user_authentication)
				VALUES ('b', 'app-key', 'b-secret', 1, 1, 1, 1, 1, 1, 0)`, table, d.quote("key")))
			require.Contains(t, loadErr(t, d.source(t, table), false), `duplicate key "app-key"`)
		})
		t.Run("empty table", func(t *testing.T) {
			table := d.soketiTable(t)
			d.exec(t, "DELETE FROM "+table)
			require.Contains(t, loadErr(t, d.source(t, table), false), "no apps defined")
		})
		t.Run("unknown table", func(t *testing.T) {
			msg := loadErr(t, d.source(t, "no_such_table"), true)
			require.Contains(t, msg, "no_such_table")
			require.Regexp(t, "does not exist|doesn't exist", msg)
		})
		t.Run("wrong password", func(t *testing.T) {
			s, err := appsdb.New(appsdb.Config{URL: strings.Replace(d.srv.URL, dbtest.Password, "wrong-"+dbtest.Password, 1), Timeout: 10 * time.Second})
			require.NoError(t, err)
			defer s.Close()
			r, err := s.Load(context.Background())
			require.Error(t, err)
			require.Nil(t, r)
			require.NotContains(t, err.Error(), dbtest.Password)
			require.NotContains(t, s.String(), dbtest.Password)
		})
		t.Run("database down", func(t *testing.T) {
			table := d.soketiTable(t)
			s, err := appsdb.New(appsdb.Config{URL: d.srv.URL, Table: table, Timeout: 2 * time.Second})
			require.NoError(t, err)
			defer s.Close()
			load(t, s)
			d.srv.Stop()
			start := time.Now()
			loadErr(t, s, true)
			require.Less(t, time.Since(start), 3*time.Second)
		})
	})
}

// TestLoadKeys: a keys column, a JSON array of {"key", "secret"}, gives
// an app its further keys.
func TestLoadKeys(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d *db) {
		table := d.soketiTable(t)
		d.exec(t, fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s json", table, d.quote("keys")),
			fmt.Sprintf(`UPDATE %s SET %s = '[{"key": "second-key", "secret": "second-secret"}]'`, table, d.quote("keys")))
		r := load(t, d.source(t, table))
		require.Equal(t, r.ByID("app-id"), r.ByKey("second-key"))
	})
}

// TestLoadHistory: an optional history column, JSON as the apps file's
// field, gives channels a history; in a text column too.
func TestLoadHistory(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d *db) {
		for _, typ := range []string{"json", "text"} {
			table := d.soketiTable(t)
			d.exec(t, fmt.Sprintf("ALTER TABLE %s ADD COLUMN history %s", table, typ),
				fmt.Sprintf(`UPDATE %s SET history = '[{"prefix": "chat-", "events": 100, "seconds": 120, "rewind": 10}]'`, table))
			r := load(t, d.source(t, table))
			require.Equal(t, apps.History{Prefix: "chat-", Events: 100, Seconds: 120, Rewind: 10}, r.ByID("app-id").HistoryFor("chat-1"), typ)
			require.Empty(t, r.Warnings())
		}
	})
}

// TestLoadUnchanged: Load decodes only rows that changed since the last
// Load, good or bad.
func TestLoadUnchanged(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, d *db) {
		table := d.soketiTable(t)
		s := d.source(t, table)
		ctx := context.Background()
		require.Equal(t, 200, load(t, s).ByID("app-id").MaxConnections)
		_, err := s.Load(ctx)
		require.ErrorIs(t, err, apps.ErrUnchanged)

		d.exec(t, fmt.Sprintf("UPDATE %s SET max_connections = 201", table))
		require.Equal(t, 201, load(t, s).ByID("app-id").MaxConnections)

		d.exec(t, fmt.Sprintf(`UPDATE %s SET webhooks = '[{"url": "http://x/", "event_types": ["nope"]}]'`, table))
		_, err = s.Load(ctx)
		require.ErrorContains(t, err, "nope")
		_, err = s.Load(ctx)
		require.ErrorIs(t, err, apps.ErrUnchanged, "reported once")

		d.exec(t, fmt.Sprintf(`UPDATE %s SET webhooks = '[]'`, table))
		require.Equal(t, 201, load(t, s).ByID("app-id").MaxConnections)

		d.exec(t, fmt.Sprintf("ALTER TABLE %s ADD COLUMN note varchar(10)", table))
		_, err = s.Load(ctx)
		require.NoError(t, err, "a new column is a change")
	})
}
