package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver for database/sql

	"github.com/headcount/headcount/internal/proctest"
)

// Password is every server's password for User.
const (
	User     = "soketi"
	Password = "s3cret-pw"
	Database = "main"
)

// startTimeout bounds a server's start on a loaded machine.
const startTimeout = 60 * time.Second

// Server is a running database server.
type Server struct {
	// URL reaches Database as User, password included:
	// postgres://... or mysql://...
	URL string
	// Addr is the server's host:port.
	Addr string
	// DB is an admin connection to Database, for the test's own setup.
	DB   *sql.DB
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	// stop is the signal that stops the server at once: PostgreSQL's
	// SIGTERM waits for its clients to leave, SIGINT does not.
	stop syscall.Signal
}

// Exec runs the statements of script, separated by ";" (a schema file:
// no ";" inside a statement), failing the test on the first error.
func (s *Server) Exec(t testing.TB, script string) {
	t.Helper()
	for _, stmt := range strings.Split(script, ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := s.DB.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", strings.TrimSpace(stmt), err)
		}
	}
}

// PID is the server's main process.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop stops the server now (a test of the database going down); the
// test's cleanup does it otherwise.
func (s *Server) Stop() {
	if s.DB != nil {
		_ = s.DB.Close()
	}
	_ = s.cmd.Process.Signal(s.stop)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// CPU is the CPU time the server's processes have used so far: the main
// process's user and system time (its threads', and its reaped
// children's) and those of its live children (PostgreSQL's backends).
func (s *Server) CPU() (time.Duration, error) {
	pid := s.PID()
	self, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	total := self.utime + self.stime + self.cutime + self.cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n == pid {
			continue
		}
		st, err := procStat(n)
		if err == nil && st.ppid == int64(pid) {
			total += st.utime + st.stime
		}
	}
	return time.Duration(total) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

type stat struct{ ppid, utime, stime, cutime, cstime int64 }

func procStat(pid int) (stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing parenthesis (field 3, state).
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return stat{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	return stat{ppid: n(4), utime: n(14), stime: n(15), cutime: n(16), cstime: n(17)}, nil
}

// binary finds name in dirs or on PATH; absent, it skips the test, or
// fails it under CI.
func binary(t testing.TB, name string, dirs ...string) string {
	t.Helper()
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s is not installed (scripts/ensure-deps.sh installs it on Debian as root: apt-get install postgresql mariadb-server)", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	} else {
		t.Skip(msg)
	}
	return ""
}

// asUser makes cmd run as the named account when this process is root,
// which PostgreSQL refuses to run as.
func asUser(t testing.TB, cmd *exec.Cmd, name string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	uid, gid := lookupUser(t, name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
}

func lookupUser(t testing.TB, name string) (int, int) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("running as root, and there is no %s account to run the server as: %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uid, gid
}

// serverDir makes a directory for a server's files. As root it is made
// outside t.TempDir (whose parents are root's, mode 0700) and given to
// the account the server runs as; it is removed at cleanup either way.
func serverDir(t testing.TB, owner string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("", "dbtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	uid, gid := lookupUser(t, owner)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs a setup command, failing the test with its output.
func run(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// start starts cmd, logging to logFile, stops it at cleanup and waits for
// open to return a database that answers.
func start(t testing.TB, cmd *exec.Cmd, stop syscall.Signal, logFile string, open func() (*sql.DB, error)) *Server {
	t.Helper()
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	s := &Server{cmd: cmd, done: make(chan struct{}), stop: stop}
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.Stop(); _ = out.Close() })
	deadline := time.Now().Add(startTimeout)
	for {
		db, err := open()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = db.PingContext(ctx)
			cancel()
			if err == nil {
				s.DB = db
				return s
			}
			_ = db.Close()
		}
		select {
		case <-s.done:
			t.Fatalf("%s exited: %v\n%s", cmd.Path, err, tail(logFile))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within %v: %v\n%s", cmd.Path, startTimeout, err, tail(logFile))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// NewPostgres starts a PostgreSQL server with User (password Password,
// scram-sha-256 over TCP) owning Database.
func NewPostgres(t testing.TB) *Server {
	t.Helper()
	// Debian keeps PostgreSQL's server binaries off PATH, by version.
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir))); return n }
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) }) // newest first
	initdb := binary(t, "initdb", dirs...)
	postgres := binary(t, "postgres", filepath.Dir(initdb))
	dir := serverDir(t, "postgres")
	data := filepath.Join(dir, "data")
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		uid, gid := lookupUser(t, "postgres")
		if err := os.Chown(pwfile, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(initdb, "-D", data, "-U", User, "--pwfile", pwfile, "--auth=scram-sha-256", "-E", "UTF8", "--no-sync", "--no-instructions")
	asUser(t, cmd, "postgres")
	run(t, cmd)
	port := proctest.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd = exec.Command(postgres, "-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=20")
	asUser(t, cmd, "postgres")
	u := func(db string) string {
		return (&url.URL{Scheme: "postgres", User: url.UserPassword(User, Password), Host: addr, Path: "/" + db, RawQuery: "sslmode=disable"}).String()
	}
	admin := start(t, cmd, syscall.SIGINT, filepath.Join(dir, "postgres.log"), func() (*sql.DB, error) { return sql.Open("pgx", u("postgres")) })
	if _, err := admin.DB.Exec("CREATE DATABASE " + Database); err != nil {
		t.Fatal(err)
	}
	_ = admin.DB.Close()
	db, err := sql.Open("pgx", u(Database))
	if err != nil {
		t.Fatal(err)
	}
	admin.DB, admin.URL, admin.Addr = db, u(Database), addr
	return admin
}

// NewMariaDB starts a MariaDB server with User@'%' (password Password,
// mysql_native_password) holding every privilege on Database.
func NewMariaDB(t testing.TB) *Server {
	t.Helper()
	installDB := binary(t, "mariadb-install-db")
	mariadbd := binary(t, "mariadbd", "/usr/sbin")
	runAs := "mysql"
	dir := serverDir(t, runAs)
	if os.Geteuid() != 0 {
		runAs = ""
	}
	data := filepath.Join(dir, "data")
	sock := filepath.Join(dir, "mysqld.sock")
	// Its temporary tables in its own directory, not /tmp: two installs
	// at once (tests in parallel) failed on each other's there.
	args := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + dir, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if runAs != "" {
		args = append(args, "--user="+runAs)
	}
	run(t, exec.Command(installDB, args...))
	port := proctest.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args = []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + dir, "--socket=" + sock, "--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1", "--skip-name-resolve", "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--innodb-buffer-pool-size=32M", "--innodb-flush-log-at-trx-commit=0", "--skip-log-bin"}
	if runAs != "" {
		args = append(args, "--user="+runAs)
	}
	cmd := exec.Command(mariadbd, args...)
	root := mysql.NewConfig()
	root.User, root.Net, root.Addr = "root", "unix", sock
	s := start(t, cmd, syscall.SIGTERM, filepath.Join(dir, "mariadbd.log"), func() (*sql.DB, error) {
		c, err := mysql.NewConnector(root)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(c), nil
	})
	for _, q := range []string{
		"CREATE DATABASE " + Database,
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", User, Password),
		fmt.Sprintf("GRANT ALL ON %s.* TO '%s'@'%%'", Database, User),
	} {
		if _, err := s.DB.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = s.DB.Close()
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = User, Password, "tcp", addr, Database
	conn, err := mysql.NewConnector(c)
	if err != nil {
		t.Fatal(err)
	}
	s.DB = sql.OpenDB(conn)
	if err := s.DB.Ping(); err != nil {
		t.Fatalf("connect as %s over TCP: %v", User, err)
	}
	s.URL = (&url.URL{Scheme: "mysql", User: url.UserPassword(User, Password), Host: addr, Path: "/" + Database}).String()
	s.Addr = addr
	return s
}
