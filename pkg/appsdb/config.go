package appsdb

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
)

// Defaults.
const (
	// DefaultTable is the apps table's name: soketi's default.
	DefaultTable = "apps"
	// DefaultTimeout bounds one Load: connecting, the query and reading
	// every row.
	DefaultTimeout = 5 * time.Second
)

// Config says where the apps table is.
type Config struct {
	// URL is the database: postgres://user:password@host:port/db (or
	// postgresql://, with any of pgx's parameters such as sslmode), or
	// mysql://user:password@host:port/db (TCP; go-sql-driver/mysql's DSN
	// parameters, such as tls, may follow the "?").
	URL string
	// Table is the apps table, optionally schema-qualified (schema.table):
	// letters, digits and underscores. Empty means DefaultTable.
	Table string
	// Timeout bounds each Load; zero means DefaultTimeout.
	Timeout time.Duration
	// Logger receives a warning when the table has columns neither
	// headcount nor soketi reads; nil discards it.
	Logger hclog.Logger
}

// dialect is the kind of database a URL names.
type dialect int

const (
	postgres dialect = iota
	mariadb
)

// identPart is one part of a table name: what both dialects accept
// unquoted, so quoting it never changes what it names beyond case.
var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// checkTable validates a table name, optionally schema-qualified, and
// returns its parts.
func checkTable(name string) ([]string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("apps table %q: at most one dot (schema.table)", name)
	}
	for _, p := range parts {
		if !identPart.MatchString(p) {
			return nil, fmt.Errorf("apps table %q: each part must be 1-63 letters, digits or underscores, not starting with a digit", name)
		}
	}
	return parts, nil
}

// quoteTable quotes validated parts for d: "schema"."table" or
// `schema`.`table`. The parts hold no quote characters (checkTable).
func quoteTable(d dialect, parts []string) string {
	q := `"`
	if d == mariadb {
		q = "`"
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = q + p + q
	}
	return strings.Join(quoted, ".")
}

// parsed is a Config checked and taken apart.
type parsed struct {
	dialect  dialect
	pg       *pgx.ConnConfig
	my       *mysql.Config
	table    []string
	where    string // host:port/db, for String
	password string // to scrub from errors
	timeout  time.Duration
}

// parse validates cfg without dialing.
func parse(cfg Config) (*parsed, error) {
	p := &parsed{timeout: cfg.Timeout}
	if p.timeout == 0 {
		p.timeout = DefaultTimeout
	}
	var errs []error
	if p.timeout < 0 {
		errs = append(errs, fmt.Errorf("apps db timeout must be positive, not %v", cfg.Timeout))
	}
	table := cfg.Table
	if table == "" {
		table = DefaultTable
	}
	parts, err := checkTable(table)
	if err != nil {
		errs = append(errs, err)
	}
	p.table = parts
	if err := p.parseURL(cfg.URL); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// parseURL fills in the dialect and the driver's configuration. Its
// errors never quote the URL, which holds the password.
func (p *parsed) parseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("apps db URL does not parse as a URL (postgres://user:password@host:port/db or mysql://user:password@host:port/db)")
	}
	if u.User != nil {
		p.password, _ = u.User.Password()
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		p.dialect = postgres
		c, err := pgx.ParseConfig(raw)
		if err != nil {
			return fmt.Errorf("apps db URL: %s", scrub(err.Error(), p.password))
		}
		// No statement cache: a cached statement fails once its table is
		// altered ("cached plan must not change result type"), and the
		// unnamed statement pgx prepares instead also suits PgBouncer's
		// transaction pooling. One more round trip every few seconds.
		c.DefaultQueryExecMode = pgx.QueryExecModeDescribeExec
		if c.ConnectTimeout == 0 || c.ConnectTimeout > p.timeout {
			c.ConnectTimeout = p.timeout
		}
		p.pg = c
		p.where = fmt.Sprintf("%s/%s", net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))), c.Database)
		return nil
	case "mysql":
		p.dialect = mariadb
		c, err := mysqlConfig(u)
		if err != nil {
			return fmt.Errorf("apps db URL: %s", scrub(err.Error(), p.password))
		}
		if c.Timeout == 0 || c.Timeout > p.timeout {
			c.Timeout = p.timeout
		}
		p.my = c
		p.where = fmt.Sprintf("%s/%s", c.Addr, c.DBName)
		return nil
	}
	return fmt.Errorf("apps db URL scheme %q: want postgres, postgresql or mysql", u.Scheme)
}

// mysqlConfig converts mysql://user:password@host:port/db?params to
// go-sql-driver's configuration.
func mysqlConfig(u *url.URL) (*mysql.Config, error) {
	if u.Opaque != "" || u.Host == "" {
		return nil, errors.New("mysql URL needs a host: mysql://user:password@host:port/db")
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "3306"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("mysql URL port %q is not a port number", port)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, errors.New("mysql URL needs a database: mysql://user:password@host:port/db")
	}
	c := mysql.NewConfig()
	if u.RawQuery != "" {
		// go-sql-driver's DSN takes the same key=value&... parameters and
		// checks them.
		var err error
		if c, err = mysql.ParseDSN("/?" + u.RawQuery); err != nil {
			return nil, err
		}
	}
	c.User = u.User.Username()
	c.Passwd, _ = u.User.Password()
	c.Net = "tcp"
	c.Addr = net.JoinHostPort(host, port)
	c.DBName = db
	return c, nil
}

// scrub removes password from s: a driver's error might quote it.
func scrub(s, password string) string {
	if password == "" {
		return s
	}
	return strings.ReplaceAll(s, password, "xxxxx")
}

// SoketiDriverVariable chooses soketi's app manager: postgres or mysql put
// the apps in a database (FromSoketiEnv).
const SoketiDriverVariable = "SOKETI_APP_MANAGER_DRIVER"

// soketiDialect is what soketi reads for one dialect, with its defaults
// (soketi 1.6's src/server.ts).
type soketiDialect struct {
	scheme, prefix, table              string
	host, port, user, password, dbname string
}

var soketiDialects = map[string]soketiDialect{
	"postgres": {
		scheme: "postgres", prefix: "SOKETI_DB_POSTGRES_", table: "SOKETI_APP_MANAGER_POSTGRES_TABLE",
		host: "127.0.0.1", port: "5432", user: "postgres", password: "password", dbname: "main",
	},
	"mysql": {
		scheme: "mysql", prefix: "SOKETI_DB_MYSQL_", table: "SOKETI_APP_MANAGER_MYSQL_TABLE",
		host: "127.0.0.1", port: "3306", user: "root", password: "password", dbname: "main",
	},
}

// FromSoketiEnv reads soketi's app manager variables: with
// SOKETI_APP_MANAGER_DRIVER postgres or mysql it returns the Config of
// that database and table (SOKETI_DB_POSTGRES_HOST, _PORT, _USERNAME,
// _PASSWORD, _DATABASE and SOKETI_APP_MANAGER_POSTGRES_TABLE, or the
// SOKETI_DB_MYSQL_ and SOKETI_APP_MANAGER_MYSQL_TABLE ones), soketi's
// default for each one unset or empty (as soketi, which reads an empty
// variable as unset), and true. With the driver unset, empty or "array"
// it returns false: the apps are not in a database. Any other driver
// (dynamodb) is an error naming the variable. The error never holds the
// password. Soketi's other app manager variables do not change where the
// apps are: see SoketiEnvIgnored.
func FromSoketiEnv(lookup func(string) (string, bool)) (Config, bool, error) {
	get := func(name, def string) string {
		if v, _ := lookup(name); v != "" {
			return v
		}
		return def
	}
	driver := get(SoketiDriverVariable, "")
	switch driver {
	case "", "array":
		return Config{}, false, nil
	}
	d, ok := soketiDialects[driver]
	if !ok {
		return Config{}, false, fmt.Errorf("%s=%q: headcount reads apps from an apps file, PostgreSQL (postgres) or MySQL/MariaDB (mysql)", SoketiDriverVariable, driver)
	}
	port := get(d.prefix+"PORT", d.port)
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Config{}, false, fmt.Errorf("%sPORT=%q is not a port number", d.prefix, port)
	}
	u := url.URL{
		Scheme: d.scheme,
		User:   url.UserPassword(get(d.prefix+"USERNAME", d.user), get(d.prefix+"PASSWORD", d.password)),
		Host:   net.JoinHostPort(get(d.prefix+"HOST", d.host), port),
		Path:   "/" + get(d.prefix+"DATABASE", d.dbname),
	}
	cfg := Config{URL: u.String(), Table: get(d.table, DefaultTable)}
	if _, err := parse(cfg); err != nil {
		return Config{}, false, fmt.Errorf("%s=%s and its SOKETI_DB_ variables: %w", SoketiDriverVariable, driver, err)
	}
	return cfg, true, nil
}

// soketiIgnored are soketi's app manager variables that headcount reads no
// value from, and why.
var soketiIgnored = []struct{ name, why string }{
	{"SOKETI_APP_MANAGER_CACHE_ENABLED", "headcount holds every app in memory and reloads the whole table periodically"},
	{"SOKETI_APP_MANAGER_CACHE_TTL", "headcount holds every app in memory and reloads the whole table periodically"},
	{"SOKETI_APP_MANAGER_POSTGRES_VERSION", "the version is read from the server"},
	{"SOKETI_APP_MANAGER_MYSQL_VERSION", "the version is read from the server"},
	{"SOKETI_APP_MANAGER_MYSQL_USE_V2", "headcount has one MySQL driver"},
	{"SOKETI_DB_POOLING_ENABLED", "headcount uses at most 2 connections, for the periodic reload"},
	{"SOKETI_DB_POOLING_MIN", "headcount uses at most 2 connections, for the periodic reload"},
	{"SOKETI_DB_POOLING_MAX", "headcount uses at most 2 connections, for the periodic reload"},
}

// SoketiEnvIgnored returns a sentence for each of soketi's app manager
// variables that is set but that headcount does not read (the app cache,
// the knex client version, connection pooling), for a warning at start.
func SoketiEnvIgnored(lookup func(string) (string, bool)) []string {
	var out []string
	for _, v := range soketiIgnored {
		if s, _ := lookup(v.name); s != "" {
			out = append(out, fmt.Sprintf("%s is ignored: %s", v.name, v.why))
		}
	}
	return out
}
