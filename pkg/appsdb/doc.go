// Package appsdb reads the apps from a PostgreSQL or MySQL/MariaDB table,
// as soketi's SQL app managers (APP_MANAGER_DRIVER postgres and mysql)
// keep them, so a soketi deployment's apps table serves headcount
// unchanged. A Source is an apps.Source: its Load reads the whole table
// anew in one SELECT, bounded by Config.Timeout, and decodes it with
// apps.Decode; a reloader calls it every few seconds, and at once (at most
// twice a second) when a connection or request names an app it does not
// serve, and keeps the last good set when it fails. Nothing else is
// queried per connection or request, and a connection of an app served
// queries nothing.
// Load returns apps.ErrUnchanged when the rows are those it read last
// time (a digest of the values; decoding is most of a reload's cost), and
// an *apps.UnavailableError when the table cannot be read (the database
// down or out of reach within the timeout, wrong credentials, no such
// table).
//
// # Wiring
//
//	cfg := appsdb.Config{URL: "postgres://user:pw@db:5432/main", Table: "apps"}
//	// or, from soketi's variables (SOKETI_APP_MANAGER_DRIVER=postgres|mysql,
//	// SOKETI_DB_POSTGRES_* or SOKETI_DB_MYSQL_*, the _TABLE variables):
//	cfg, ok, err := appsdb.FromSoketiEnv(os.LookupEnv)
//	src, err := appsdb.New(cfg) // validates; does not connect
//	defer src.Close()
//	reg, err := src.Load(ctx)   // connects on first use
//
// New's errors are about settings (the URL, the table name, the timeout)
// and make a bad configuration exit 2 before anything dials. No error
// and no String hold the password. SoketiEnvIgnored names soketi's
// variables that are set but that headcount does not read (the app cache
// and its TTL: the reload interval takes their place; the knex client
// version; pooling), for a warning at start.
//
// # Columns
//
// Every column is read (SELECT *), and each becomes the app field of its
// name, matched as in an apps file (without regard to case or
// underscores, soketi's column names included: max_backend_events_per_sec
// is maxBackendEventsPerSecond). A boolean field may be a number (soketi's
// tables hold them as tinyint(1) or smallint 0/1); a list or object field
// (webhooks, capacities, history, admission, allowed_origins, and keys,
// an app's further key/secret pairs) is JSON, in a JSON column or a text one. NULL
// and the empty string leave the field at its default, as in soketi. A
// column soketi reads that headcount does not implement
// (max_event_name_length) is ignored with the apps file's warning
// (Registry.Warnings); a column neither reads (created_at) is ignored and
// named once in a warning log. A value that does not decode (webhooks
// that are not JSON) fails the Load with an error naming the app and the
// column, as does an app that does not validate.
//
// # Connections
//
// A Source holds at most two connections (database/sql over pgx's stdlib
// or go-sql-driver/mysql) and is safe for concurrent use. PostgreSQL
// statements are not cached (pgx's DescribeExec), so an ALTER TABLE never
// fails a Load, and PgBouncer's transaction pooling works.
package appsdb
