package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ErrVersion is what the Parse functions return for --version, before any
// validation (as flag.ErrHelp for -h): the caller prints the version and
// exits 0.
var ErrVersion = errors.New("version requested")

// stop reports whether a Parse function returns err at once, unvalidated:
// -h and --version.
func stop(err error) bool { return errors.Is(err, flag.ErrHelp) || errors.Is(err, ErrVersion) }

// set registers flags whose defaults already include the environment, and
// parses them collecting every problem rather than stopping at the first.
type set struct {
	name string
	fs   *flag.FlagSet
	env  Env
	out  io.Writer // the usage, for -h
	errs []error
	// cmn is the Common registered with the set, told after parsing
	// whether --redis was given.
	cmn *Common
	// kinds names what each flag's value is, for the usage ("" for a
	// boolean).
	kinds map[string]string
	// commands, if any, are the subcommands the usage lists.
	commands string
	version  bool
}

func newSet(name string, env Env, out io.Writer) *set {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package prints each error, and the whole usage after it:
	// parse collects the errors instead, and prints the usage for -h only.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	s := &set{name: name, fs: fs, env: env, out: out, kinds: map[string]string{}}
	fs.BoolVar(&s.version, "version", false, "print the version and VCS revision, and exit")
	return s
}

// EnvName is the environment variable for a flag: HEADCOUNT_<FLAG_IN_UPPER_SNAKE>.
func EnvName(flagName string) string {
	return "HEADCOUNT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// value is a flag.Value that records a bad value among the set's errors
// instead of failing the parse, so the flags after it are still read and
// every bad setting is reported at once.
type value struct {
	s      *set
	name   string
	parse  func(string) error // sets the setting, or says why not
	show   func() string
	isBool bool
}

func (v *value) Set(x string) error {
	if err := v.parse(x); err != nil {
		v.s.errs = append(v.s.errs, fmt.Errorf("--%s: %q %w", v.name, x, err))
	}
	return nil
}

func (v *value) String() string {
	if v == nil || v.show == nil {
		return ""
	}
	return v.show()
}

// IsBoolFlag lets a boolean be given as --flag alone.
func (v *value) IsBoolFlag() bool { return v.isBool }

// add registers a setting: its environment variable now (a bad value is
// an error naming the variable), its flag for parse.
func (s *set) add(name, kind, usage string, show func() string, parse func(string) error) {
	if v, ok := s.lookup(name); ok {
		if err := parse(v); err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s: %q %w", EnvName(name), v, err))
		}
	}
	s.kinds[name] = kind
	s.fs.Var(&value{s: s, name: name, parse: parse, show: show, isBool: kind == ""}, name, usage+" (env "+EnvName(name)+")")
}

func (s *set) str(p *string, name, usage string) {
	s.add(name, "string", usage, func() string { return strconv.Quote(*p) }, func(v string) error { *p = v; return nil })
}

func (s *set) dur(p *time.Duration, name, usage string) {
	s.add(name, "duration", usage, func() string { return p.String() }, func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return errors.New("is not a duration (e.g. 500ms, 3s)")
		}
		*p = d
		return nil
	})
}

func (s *set) integer(p *int, name, usage string) {
	s.add(name, "int", usage, func() string { return strconv.Itoa(*p) }, func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errors.New("is not an integer")
		}
		*p = n
		return nil
	})
}

func (s *set) boolean(p *bool, name, usage string) {
	s.add(name, "", usage, func() string { return strconv.FormatBool(*p) }, func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("is not a boolean (true or false)")
		}
		*p = b
		return nil
	})
}

// secret registers a string setting that may hold a password, a URL's
// (password false: the URL is shown redacted) or a password itself (shown
// as xxxxx): the usage prints defaults.
func (s *set) secret(p *string, name string, password bool, usage string) {
	s.add(name, "string", usage, func() string {
		switch {
		case *p == "":
			return `""`
		case password:
			return "xxxxx"
		default:
			return Redact(*p)
		}
	}, func(v string) error { *p = v; return nil })
}

func (s *set) lookup(name string) (string, bool) {
	v, _ := s.env(EnvName(name))
	return v, v != ""
}

// parse parses args and returns the words that are not flags. It goes on
// past a bad flag, so every problem is reported at once. With passOn, the
// first word (a subcommand) and everything after it that is not one of
// the set's flags, the subcommand's own flags included, are returned in
// order: flags of the set may come before or after the subcommand.
func (s *set) parse(args []string, passOn bool) ([]string, error) {
	var words []string
	for {
		err := s.fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			s.usage()
			return nil, err
		}
		rest := s.fs.Args()
		if err != nil && len(rest) == len(args) {
			rest = rest[1:] // bad flag syntax (---x) is refused unconsumed
		}
		var last string // the argument parsing stopped after
		if n := len(args) - len(rest); n > 0 {
			last = args[n-1]
		}
		switch {
		case err != nil && passOn && len(words) > 0 && strings.HasPrefix(err.Error(), "flag provided but not defined"):
			words = append(words, last) // the subcommand's own
		case err != nil:
			s.errs = append(s.errs, flagError(err))
		case last == "--":
			words, rest = append(words, rest...), nil
		case len(rest) > 0:
			words, rest = append(words, rest[0]), rest[1:]
		}
		if len(rest) == 0 {
			break
		}
		args = rest
	}
	if s.version {
		return nil, ErrVersion
	}
	if s.cmn != nil {
		_, s.cmn.redisExplicit = s.lookup("redis")
		s.fs.Visit(func(f *flag.Flag) {
			if f.Name == "redis" {
				s.cmn.redisExplicit = true
			}
		})
	}
	return words, errors.Join(s.errs...)
}

// flagError words the flag package's errors as the others are: the
// setting first.
func flagError(err error) error {
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
		return fmt.Errorf("-%s: no such flag (--help lists them)", name)
	}
	return err
}

// noWords refuses the words a binary without subcommands was given: they
// are typos or misplaced values, and starting anyway would serve on the
// default ports with settings the user did not mean.
func (s *set) noWords(words []string) error {
	if len(words) == 0 {
		return nil
	}
	hint := ""
	if w := strings.TrimLeft(words[0], "-"); w == "help" || s.fs.Lookup(w) != nil {
		hint = " (did you mean --" + w + "?)"
	}
	return fmt.Errorf("unexpected argument %q: %s takes flags only%s", strings.Join(words, " "), s.name, hint)
}

// usage prints what -h shows: the synopsis, the subcommands if any, and
// every flag with its environment variable and default.
func (s *set) usage() {
	w := s.out
	fmt.Fprintf(w, "Usage: %s [flags]\n", s.name)
	if s.commands != "" {
		fmt.Fprintf(w, "       %s <command> [flags]\n\nCommands:\n%s\n", s.name, s.commands)
	}
	fmt.Fprintf(w, "\nFlags (each also read from the environment variable it names; a flag wins):\n")
	s.fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		if k, ok := s.kinds[f.Name]; ok && !strings.Contains(f.Usage, "`") {
			kind = k
		}
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch f.DefValue {
		case "", `""`, "0", "false", "0s":
		default:
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func (s *set) common(c *Common) {
	s.cmn = c
	s.secret(&c.Redis, "redis", false, "single Redis server `URL`: redis://[user:password@]host:port[/db], rediss:// for TLS")
	s.secret(&c.RedisCluster, "redis-cluster", false, "Redis Cluster `seeds-or-URL` (Cluster mode when set): comma-separated seeds host:port, or redis[s]://[user:password@]host:port?addr=host:port&addr=...")
	s.str(&c.RedisSentinel, "redis-sentinel", "Redis Sentinel (Sentinel mode when set): comma-separated sentinel addresses host:port")
	s.str(&c.RedisSentinelMaster, "redis-sentinel-master", "with --redis-sentinel: the master name the sentinels monitor")
	s.secret(&c.RedisSentinelPassword, "redis-sentinel-password", true, "with --redis-sentinel: the sentinels' own `password` (empty: none)")
	s.str(&c.RedisSentinelPasswordFile, "redis-sentinel-password-file", "with --redis-sentinel: file holding the sentinels' own password, re-read when it changes as --redis-password-file is; not with --redis-sentinel-password")
	s.str(&c.RedisSentinelUsername, "redis-sentinel-username", "with --redis-sentinel: the sentinels' own ACL user (empty: none)")
	s.str(&c.RedisUsername, "redis-username", "Redis ACL user (the master in Sentinel mode, every node in Cluster mode), instead of the URL's")
	s.secret(&c.RedisPassword, "redis-password", true, "Redis `password` (the master in Sentinel mode, every node in Cluster mode), instead of the URL's; prefer the environment to the flag, or --redis-password-file")
	s.str(&c.RedisPasswordFile, "redis-password-file", "file holding the Redis password (a trailing newline is dropped), re-read when it changes: a rotated Secret needs no restart; not with --redis-password or a URL password")
	s.boolean(&c.RedisTLS, "redis-tls", "TLS to Redis in every mode (a rediss:// URL implies it)")
	s.str(&c.RedisTLSCA, "redis-tls-ca", "PEM file of the CAs that sign the Redis servers' certificates (empty: the system's); re-read when it changes")
	s.str(&c.RedisTLSCert, "redis-tls-cert", "PEM client certificate for Redis servers that require one (with --redis-tls-key); both re-read when they change")
	s.str(&c.RedisTLSKey, "redis-tls-key", "PEM key of --redis-tls-cert")
	s.str(&c.AppsFile, "apps-file", "JSON apps file: an array of apps, or a soketi config file (default: one app from HEADCOUNT_APP_ID/_APP_KEY/_APP_SECRET or SOKETI_DEFAULT_APP_*)")
	s.secret(&c.AppsDB, "apps-db", false, "database `URL` of the apps table, as soketi's SQL app managers keep it: postgres://user:password@host:5432/db or mysql://user:password@host:3306/db (not with --apps-file)")
	s.str(&c.AppsDBTable, "apps-db-table", "with --apps-db: the apps table, optionally schema.table")
	s.dur(&c.AppsRefresh, "apps-refresh", "how often the apps' source is read for changes (an apps file's are also seen at once, and SIGHUP reloads)")
	s.str(&c.AdminAddr, "admin-addr", "address serving /metrics, /healthz, /readyz (empty: off)")
	s.str(&c.LogLevel, "log-level", "trace, debug, info, warn or error")
	s.str(&c.LogFormat, "log-format", "text or json")
	s.str(&c.RedisPrefix, "redis-prefix", "prefix of every Redis key and channel; deployments sharing a Redis need different ones")
	s.integer(&c.HistoryBudgetMB, "history-budget-mb", "MiB of events each app's channel histories hold at most (apps field history); the oldest go first past it. Give the wsnodes and the HTTP API the same")
	s.integer(&c.SliceSize, "slice-size", "contribution fields one Redis script of a reap, an audit or a republish handles at most (0: the built-in default)")
}
