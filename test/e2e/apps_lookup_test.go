package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"

	"github.com/headcount/headcount/internal/dbtest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/wsclient"
)

// TestNewAppServedAtFirstClient: an app written to the apps' source is
// served by a wsnode and an httpapi at its first client, though neither
// has polled since (--apps-refresh 30s) nor been told: the process looks a
// key or id it does not serve up in the source before refusing it. pusher-js
// never retries the 4001 a refusal would get. For PostgreSQL (a row
// inserted) and for an apps file whose change the directory watch cannot
// see (a symlink repointed in a directory not watched, as a change on a
// network filesystem goes unseen).
func TestNewAppServedAtFirstClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// source starts the source holding soketi's app-id/app-key, and
		// returns the flags naming it and how to add an app.
		source func(t *testing.T) (args []string, add func(id, key, secret string))
	}{
		{name: "postgres", source: func(t *testing.T) ([]string, func(id, key, secret string)) {
			db := dbtest.NewPostgres(t)
			db.Exec(t, soketiSchema(t, "soketi-postgres.sql"))
			return []string{"--apps-db", db.URL}, func(id, key, secret string) { db.Exec(t, insertApp(`"key"`, id, key, secret)) }
		}},
		{name: "apps file", source: func(t *testing.T) ([]string, func(id, key, secret string)) {
			// apps.json -> links/current -> v1/apps.json: the watch is on
			// the directories of apps.json and of v1/apps.json, not on
			// links/, where the change is made.
			dir := t.TempDir()
			write := func(version string, list ...reloadApp) {
				if err := os.MkdirAll(filepath.Join(dir, version), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, version, "apps.json"), []byte(appsJSON(t, list...)), 0o600); err != nil {
					t.Fatal(err)
				}
				tmp := filepath.Join(dir, "links", "next")
				if err := os.Symlink(filepath.Join("..", version, "apps.json"), tmp); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, filepath.Join(dir, "links", "current")); err != nil {
					t.Fatal(err)
				}
			}
			for _, d := range []string{"links", "main"} {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			first := reloadApp{ID: "app-id", Key: "app-key", Secret: "app-secret"}
			write("v1", first)
			path := filepath.Join(dir, "main", "apps.json")
			if err := os.Symlink(filepath.Join("..", "links", "current"), path); err != nil {
				t.Fatal(err)
			}
			return []string{"--apps-file", path}, func(id, key, secret string) {
				write("v2", first, reloadApp{ID: id, Key: key, Secret: secret})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, add := tc.source(t)
			redis := redistest.New(t)
			args = append(args, "--redis", redis.URL(), "--apps-refresh", "30s")
			ws := node{addr: freeAddr(t), admin: freeAddr(t)}
			ws.p = start(t, "ws", "wsnode", append(args, "--addr", ws.addr, "--admin-addr", ws.admin, "--node-id", "ws")...)
			api := node{addr: freeAddr(t), admin: freeAddr(t)}
			api.p = start(t, "api", "httpapi", append(args, "--addr", api.addr, "--admin-addr", api.admin)...)
			waitReady(t, ws.p, ws.admin)
			waitReady(t, api.p, api.admin)

			add("app-2", "key-2", "secret-2")
			// Once each, no retry: pusher-js does not retry a 4001.
			c, err := wsclient.Dial(ws.addr, "/app/key-2?protocol=7")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			msg, err := c.Read(15 * time.Second)
			if err != nil || !strings.Contains(msg, "pusher:connection_established") {
				t.Errorf("the new app's first socket: got %q, %v; want connection_established", msg, err)
			}
			client := &pusher.Client{AppID: "app-2", Key: "key-2", Secret: "secret-2", Host: api.addr}
			if _, err := client.Channels(pusher.ChannelsParams{}); err != nil {
				t.Errorf("the new app's first API request: %v", err)
			}
			for _, n := range []node{ws, api} {
				if v := metric(n.admin, "headcount_apps_lookups_total", "result", "found"); v != 1 {
					t.Errorf("%s: headcount_apps_lookups_total{result=\"found\"} %v, want 1", n.admin, v)
				}
			}
		})
	}
}
