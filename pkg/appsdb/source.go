package appsdb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/headcount/headcount/pkg/apps"
)

// maxConns bounds the connections a Source holds: Load runs one query at
// a time, and a second connection covers a reload on demand overlapping a
// periodic one.
const maxConns = 2

// Source reads the apps from a database table: an apps.Source.
type Source struct {
	p      *parsed
	db     *sql.DB
	query  string
	logger hclog.Logger

	mu      sync.Mutex
	plans   map[string]*plan // by column list, see planFor
	ignored string           // the ignored columns last warned about
	last    [sha256.Size]byte
	seen    bool // last holds the digest of the rows the last Load read
}

var _ apps.Source = (*Source)(nil)

// New checks cfg and returns a Source that will read the table; it does
// not connect (Load does). Its errors never hold the password.
func New(cfg Config) (*Source, error) {
	p, err := parse(cfg)
	if err != nil {
		return nil, err
	}
	var db *sql.DB
	switch p.dialect {
	case postgres:
		db = stdlib.OpenDB(*p.pg)
	case mariadb:
		conn, err := mysql.NewConnector(p.my)
		if err != nil {
			return nil, fmt.Errorf("apps db URL: %s", scrub(err.Error(), p.password))
		}
		db = sql.OpenDB(conn)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	// A server or proxy may drop idle connections; a reload every few
	// seconds keeps one busy, and this retires the other.
	db.SetConnMaxIdleTime(time.Minute)
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Source{
		p:      p,
		db:     db,
		query:  "SELECT * FROM " + quoteTable(p.dialect, p.table),
		logger: logger,
		plans:  map[string]*plan{},
	}, nil
}

// SetLogger gives the Source the binary's logger, for the warning about
// columns it ignores; call it before the first Load.
func (s *Source) SetLogger(l hclog.Logger) { s.logger = l }

// Close closes the Source's connections.
func (s *Source) Close() error { return s.db.Close() }

// String names the table and the database, without credentials.
func (s *Source) String() string {
	kind := "postgres"
	if s.p.dialect == mariadb {
		kind = "mysql"
	}
	return fmt.Sprintf("%s apps table %s at %s", kind, strings.Join(s.p.table, "."), s.p.where)
}

// Load reads the whole table in one query, bounded by the Config's
// Timeout, and decodes each row as an app object (apps.Decode). When the
// rows are those the previous Load read (whether they decoded or not), it
// returns apps.ErrUnchanged without decoding them again: decoding is most
// of a reload's cost. A failure to read the table is an
// *apps.UnavailableError; a row that does not decode is an error naming
// the app and the column. No error holds the password.
func (s *Source) Load(ctx context.Context) (*apps.Registry, error) {
	ctx, cancel := context.WithTimeout(ctx, s.p.timeout)
	defer cancel()
	pl, vals, sum, err := s.read(ctx)
	if err != nil {
		if s.p.password != "" && strings.Contains(err.Error(), s.p.password) {
			err = scrubbed{scrub(err.Error(), s.p.password), err}
		}
		return nil, &apps.UnavailableError{Err: fmt.Errorf("read %s: %w", s, err)}
	}
	s.mu.Lock()
	unchanged := s.seen && sum == s.last
	s.last, s.seen = sum, true
	s.mu.Unlock()
	if unchanged {
		return nil, apps.ErrUnchanged
	}
	objs := make([]map[string]json.RawMessage, len(vals))
	var errs []error
	for i, v := range vals {
		if objs[i], err = pl.object(v); err != nil {
			errs = append(errs, fmt.Errorf("row %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	r, err := apps.Decode(objs)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// scrubbed is an error whose text quoted the password, without it. It
// answers errors.Is as the original does but does not unwrap to it, whose
// text would quote the password.
type scrubbed struct {
	msg  string
	orig error
}

func (e scrubbed) Error() string        { return e.msg }
func (e scrubbed) Is(target error) bool { return errors.Is(e.orig, target) }

// read returns every row's values, the plan that makes them app
// objects, and a digest of the columns and the values the plan reads.
func (s *Source) read(ctx context.Context) (*plan, [][]any, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	rows, err := s.db.QueryContext(ctx, s.query)
	if err != nil {
		return nil, nil, sum, err
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, nil, sum, err
	}
	pl := s.planFor(types)
	h := sha256.New()
	for _, t := range types {
		h.Write([]byte(t.Name() + " " + t.DatabaseTypeName() + "\x00"))
	}
	var out [][]any
	var buf []byte
	for rows.Next() {
		vals := make([]any, len(types))
		ptrs := make([]any, len(types))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, sum, err
		}
		out = append(out, vals)
		buf = append(buf[:0], '\n')
		for i, c := range pl.cols {
			if c.kind != skip {
				buf = appendValue(strconv.AppendInt(buf, int64(i), 10), vals[i])
			}
		}
		h.Write(buf)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, sum, err
	}
	h.Sum(sum[:0])
	return pl, out, sum, nil
}

// appendValue appends v, a value database/sql scanned into an any, so
// that no two values append the same bytes: a type letter, and a length
// before text.
func appendValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, 'N')
	case []byte:
		return append(append(strconv.AppendInt(append(b, 'B'), int64(len(v)), 10), ':'), v...)
	case string:
		return append(append(strconv.AppendInt(append(b, 'S'), int64(len(v)), 10), ':'), v...)
	case int64:
		return strconv.AppendInt(append(b, 'I'), v, 10)
	case float64:
		return strconv.AppendFloat(append(b, 'F'), v, 'g', -1, 64)
	case bool:
		return strconv.AppendBool(append(b, 'T'), v)
	case time.Time:
		return v.AppendFormat(append(b, 'D'), time.RFC3339Nano)
	}
	s := fmt.Sprintf("%T:%v", v, v)
	return append(append(strconv.AppendInt(append(b, 'O'), int64(len(s)), 10), ':'), s...)
}

// column says how one column's values become JSON.
type column struct {
	name    string
	kind    kind
	numeric bool // of a numeric type (isNumeric)
}

type kind int

const (
	skip     kind = iota // a column no app field takes
	scalar               // a number or a string, as the driver gives it
	boolean              // a number (tinyint, smallint) or a boolean
	jsonText             // JSON, given as text by the driver
)

// plan is how the columns of one result become an app object.
type plan struct {
	cols []column
	id   int // the index of the id column, for messages; -1 if none
}

// planFor returns the plan for these columns, made once per column list.
func (s *Source) planFor(types []*sql.ColumnType) *plan {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = t.Name() + " " + t.DatabaseTypeName()
	}
	key := strings.Join(names, ",")
	s.mu.Lock()
	defer s.mu.Unlock()
	if pl, ok := s.plans[key]; ok {
		return pl
	}
	pl := &plan{cols: make([]column, len(types)), id: -1}
	var ignored []string
	for i, t := range types {
		c := column{name: t.Name(), kind: kindOf(t), numeric: isNumeric(t.DatabaseTypeName())}
		if c.kind == skip {
			ignored = append(ignored, c.name)
		}
		if cn := canonical(c.name); cn == "id" || cn == "appid" {
			pl.id = i
		}
		pl.cols[i] = c
	}
	if len(s.plans) > 16 {
		clear(s.plans) // a table altered again and again: keep the last few
	}
	s.plans[key] = pl
	if msg := strings.Join(ignored, ", "); msg != s.ignored {
		s.ignored = msg
		if msg != "" {
			s.logger.Warn("apps table columns ignored: neither headcount nor soketi reads them", "source", s.String(), "columns", msg)
		}
	}
	return pl
}

// canonical is how apps.Decode matches names: without regard to case or
// underscores.
func canonical(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", ""))
}

// kindOf classifies a column by name and type: boolean for apps.App's
// bool fields (MySQL's tinyint(1) and soketi's Postgres smallint hold
// them as 0/1), jsonText for its list and object fields (webhooks,
// keys...) and any JSON-typed column, skip for a column apps.Decode
// refuses as unknown, scalar for the rest.
func kindOf(t *sql.ColumnType) kind {
	c := canonical(t.Name())
	switch {
	case !known(t.Name()):
		return skip
	case boolFields[c]:
		return boolean
	case jsonFields[c]:
		return jsonText
	}
	switch strings.ToUpper(t.DatabaseTypeName()) {
	case "JSON", "JSONB":
		return jsonText
	}
	return scalar
}

// boolFields and jsonFields are apps.App's fields, canonical, whose
// values are JSON booleans and JSON arrays or objects.
var boolFields, jsonFields = func() (b, j map[string]bool) {
	b, j = map[string]bool{}, map[string]bool{}
	t := reflect.TypeFor[apps.App]()
	for i := range t.NumField() {
		f := t.Field(i)
		switch f.Type.Kind() {
		case reflect.Bool:
			b[canonical(f.Name)] = true
		case reflect.Slice, reflect.Struct, reflect.Map, reflect.Array:
			j[canonical(f.Name)] = true
		}
	}
	return b, j
}()

// knownCache remembers known's answers.
var knownCache sync.Map

// known reports whether apps.Decode takes a field of this name, as one of
// headcount's or as a soketi setting it ignores with a warning: it asks
// Decode itself, with the field null beside a valid app, so this package
// keeps no list of its own.
func known(name string) bool {
	if v, ok := knownCache.Load(name); ok {
		return v.(bool)
	}
	probe := map[string]json.RawMessage{
		"id": json.RawMessage(`"probe"`), "key": json.RawMessage(`"probe-key"`), "secret": json.RawMessage(`"probe-secret-probe-secret"`),
	}
	ok := true
	if _, dup := probe[canonical(name)]; !dup && canonical(name) != "appid" && canonical(name) != "appkey" && canonical(name) != "appsecret" {
		probe[name] = json.RawMessage("null")
		_, err := apps.Decode([]map[string]json.RawMessage{probe})
		ok = err == nil
	}
	knownCache.Store(name, ok)
	return ok
}

// object turns one row's values into an app object. NULL and the empty
// string are left out, as soketi reads both as "use the default".
func (pl *plan) object(vals []any) (map[string]json.RawMessage, error) {
	obj := make(map[string]json.RawMessage, len(vals))
	var errs []error
	for i, c := range pl.cols {
		if c.kind == skip || vals[i] == nil {
			continue
		}
		v, err := c.value(vals[i])
		if err != nil {
			id := "?"
			if pl.id >= 0 && vals[pl.id] != nil {
				id = fmt.Sprint(text(vals[pl.id]))
			}
			errs = append(errs, fmt.Errorf("app %q: column %s: %w", id, c.name, err))
			continue
		}
		if v != nil {
			obj[c.name] = v
		}
	}
	return obj, errors.Join(errs...)
}

// text is a driver's text value as a string; other values unchanged.
func text(v any) any {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return v
}

// value converts one non-NULL value; nil means leave the field out.
func (c column) value(v any) (json.RawMessage, error) {
	v = text(v)
	s, isText := v.(string)
	if isText && s == "" {
		return nil, nil
	}
	switch {
	case c.kind == jsonText && isText:
		if !json.Valid([]byte(s)) {
			return nil, errors.New("not valid JSON")
		}
		return json.RawMessage(s), nil
	case isText && c.numeric:
		// A number the driver gives as text (DECIMAL, NUMERIC).
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", s)
		}
		if c.kind == boolean {
			return json.Marshal(f != 0)
		}
		return json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64)), nil
	case c.kind == boolean:
		switch n := reflect.ValueOf(v); {
		case n.CanInt():
			return json.Marshal(n.Int() != 0)
		case n.CanUint():
			return json.Marshal(n.Uint() != 0)
		case n.CanFloat():
			return json.Marshal(n.Float() != 0)
		}
	}
	return json.Marshal(v)
}

// numericTypes are the column types, as drivers name them, whose values
// are numbers even when the driver gives them as text.
var numericTypes = []string{
	"INT", "INT2", "INT4", "INT8", "INTEGER", "TINYINT", "SMALLINT", "MEDIUMINT", "BIGINT",
	"DECIMAL", "NUMERIC", "FLOAT", "FLOAT4", "FLOAT8", "DOUBLE", "REAL",
}

func isNumeric(dbType string) bool {
	return slices.Contains(numericTypes, strings.TrimPrefix(strings.ToUpper(dbType), "UNSIGNED "))
}
