package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"

	"github.com/headcount/headcount/internal/dbtest"
	"github.com/headcount/headcount/internal/redistest"
)

// TestAppsFromSoketiTables serves the apps of soketi's own apps table, on
// PostgreSQL reached by --apps-db and on MariaDB reached by soketi's
// variables (SOKETI_APP_MANAGER_DRIVER=mysql, SOKETI_DB_MYSQL_*), as a
// soketi deployment points headcount at its database unchanged. A row
// inserted is served, one disabled closes its sockets with 4003, one
// deleted with 4001, each within 5 s of the write, by a wsnode and an
// httpapi alike.
func TestAppsFromSoketiTables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		start  func(testing.TB) *dbtest.Server
		schema string
		key    string // the key column, quoted as the dialect quotes it
		args   func(s *dbtest.Server) []string
		env    func(s *dbtest.Server) []string
	}{
		{
			name: "postgres by --apps-db", start: dbtest.NewPostgres, schema: "soketi-postgres.sql", key: `"key"`,
			args: func(s *dbtest.Server) []string { return []string{"--apps-db", s.URL} },
		},
		{
			name: "mariadb by soketi's variables", start: dbtest.NewMariaDB, schema: "soketi-mysql.sql", key: "`key`",
			env: func(s *dbtest.Server) []string {
				host, port, _ := net.SplitHostPort(s.Addr)
				return []string{"SOKETI_APP_MANAGER_DRIVER=mysql", "SOKETI_DB_MYSQL_HOST=" + host, "SOKETI_DB_MYSQL_PORT=" + port,
					"SOKETI_DB_MYSQL_USERNAME=" + dbtest.User, "SOKETI_DB_MYSQL_PASSWORD=" + dbtest.Password, "SOKETI_DB_MYSQL_DATABASE=" + dbtest.Database}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.start(t)
			db.Exec(t, soketiSchema(t, tc.schema)) // soketi's table and its row app-id/app-key
			exec := func(stmt string) time.Time {
				t.Helper()
				db.Exec(t, stmt)
				return time.Now()
			}
			var args, env []string
			if tc.args != nil {
				args = tc.args(db)
			}
			if tc.env != nil {
				env = tc.env(db)
			}
			redis := redistest.New(t)
			args = append(args, "--redis", redis.URL())
			ws := node{addr: freeAddr(t), admin: freeAddr(t)}
			ws.p = startEnv(t, "ws", "wsnode", env, append(args, "--addr", ws.addr, "--admin-addr", ws.admin, "--node-id", "ws")...)
			api := node{addr: freeAddr(t), admin: freeAddr(t)}
			api.p = startEnv(t, "api", "httpapi", env, append(args, "--addr", api.addr, "--admin-addr", api.admin)...)
			waitReady(t, ws.p, ws.admin)
			waitReady(t, api.p, api.admin)

			first := dialApp(t, ws.addr, "app-key")

			// A row inserted.
			at := exec(insertApp(tc.key, "app-2", "key-2", "secret-2"))
			second := dialApp(t, ws.addr, "key-2")
			client := &pusher.Client{AppID: "app-2", Key: "key-2", Secret: "secret-2", Host: api.addr}
			waitFor(t, 5*time.Second-time.Since(at), "the inserted app served by httpapi", func() bool {
				_, err := client.Channels(pusher.ChannelsParams{})
				return err == nil
			})
			t.Logf("%s: insert served after %v", tc.name, time.Since(at).Round(time.Millisecond))

			// Disabled, then deleted.
			at = exec(`UPDATE apps SET enabled = 0 WHERE id = 'app-2'`)
			requireClosedWith(t, second, 4003)
			t.Logf("%s: disable closed its socket after %v", tc.name, time.Since(at).Round(time.Millisecond))
			waitFor(t, 5*time.Second, "the disabled app refused by httpapi", func() bool {
				_, err := client.Channels(pusher.ChannelsParams{})
				return err != nil && strings.Contains(err.Error(), "403")
			})
			at = exec(`DELETE FROM apps WHERE id = 'app-id'`)
			requireClosedWith(t, first, 4001)
			t.Logf("%s: delete closed its socket after %v", tc.name, time.Since(at).Round(time.Millisecond))
		})
	}
}

// soketiSchema is soketi 1.6.1's own schema file for a dialect, with the
// row it inserts (pkg/appsdb/testdata).
func soketiSchema(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "pkg", "appsdb", "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// insertApp is soketi's row for an app with its defaults.
func insertApp(keyColumn, id, key, secret string) string {
	return fmt.Sprintf(`INSERT INTO apps (id, `+keyColumn+`, secret, max_connections, enabled, enable_client_messages,
		max_backend_events_per_sec, max_client_events_per_sec, max_read_req_per_sec, webhooks, enable_user_authentication)
		VALUES ('%s', '%s', '%s', -1, 1, 0, -1, -1, -1, '[]', 0)`, id, key, secret)
}

// TestAppsDBNotReadyUntilLoaded: a wsnode whose apps table cannot be read
// at start (here: not created yet) starts, is not ready and says why, and
// gets ready once the table holds its apps, with no restart.
func TestAppsDBNotReadyUntilLoaded(t *testing.T) {
	t.Parallel()
	db := dbtest.NewPostgres(t)
	redis := redistest.New(t)
	ws := node{addr: freeAddr(t), admin: freeAddr(t)}
	ws.p = start(t, "ws", "wsnode", "--redis", redis.URL(), "--apps-db", db.URL, "--apps-refresh", "200ms", "--addr", ws.addr, "--admin-addr", ws.admin)
	readyz := func() int {
		resp, err := http.Get("http://" + ws.admin + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, 10*time.Second, "an ERROR saying why it is not ready", func() bool {
		b, _ := os.ReadFile(ws.p.log)
		return strings.Contains(string(b), "cannot load the apps; not ready until they are")
	})
	if code := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d with no apps loaded", code)
	}
	db.Exec(t, soketiSchema(t, "soketi-postgres.sql"))
	waitFor(t, 5*time.Second, "ready once the table holds the apps", func() bool { return readyz() == http.StatusOK })
	dialApp(t, ws.addr, "app-key")
	if b, _ := os.ReadFile(ws.p.log); strings.Contains(string(b), dbtest.Password) {
		t.Fatal("the database password is in the log")
	}
}
