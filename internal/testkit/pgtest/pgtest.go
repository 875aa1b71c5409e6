// Package pgtest gives tests real PostgreSQL databases: a fresh database
// on the shared test server (NewDatabase), dropped when the test ends, or a
// private PostgreSQL server (StartServer) in a temporary directory, which a
// test may stop and start again to play an outage without disturbing other
// tests.
//
// The shared server is $SLUICE_TEST_POSTGRES (a postgres:// URL of a role
// that may create databases), by default DefaultURL: ./scripts/test.sh
// installs and starts one with trust authentication on 127.0.0.1:5432 when
// none answers. A private server needs the server binaries
// (/usr/lib/postgresql/*/bin, Debian's postgresql package); run as root,
// it runs as the postgres OS user, since PostgreSQL refuses to run as root.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"github.com/jackc/pgx/v5"
)

// EnvURL names the environment variable with the shared server's URL.
const EnvURL = "SLUICE_TEST_POSTGRES"

// DefaultURL is the shared server when EnvURL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL returns the shared server's URL: $SLUICE_TEST_POSTGRES, else
// DefaultURL.
func AdminURL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

// NewDatabase creates an empty database sluice_test_<random> on the shared
// server, drops it when the test ends (ending sessions left open), and
// returns its URL. The test fails when the server cannot be reached.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, AdminURL())
}

// WithDatabase returns the URL u with its database replaced by db.
func WithDatabase(u, db string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "postgres" && pu.Scheme != "postgresql") {
		return "", fmt.Errorf("pgtest: %s must be a postgres:// URL, got %q", EnvURL, u)
	}
	pu.Path = "/" + db
	return pu.String(), nil
}

func newDatabase(t testing.TB, adminURL string) string {
	t.Helper()
	name := "sluice_test_" + randomHex(6)
	dbURL, err := WithDatabase(adminURL, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := exec1(adminURL, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database on %s: %v (set %s to a server where the role may create databases; ./scripts/test.sh starts one)",
			redact(adminURL), err, EnvURL)
	}
	t.Cleanup(func() {
		if err := exec1(adminURL, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return dbURL
}

// Replace drops the database u names, ending its sessions, and creates
// it again empty under the same name, as an operator replacing a database
// would (dropdb --force; createdb). It connects to the server's postgres
// database to do so.
func Replace(u string) error {
	if err := DropDatabase(u); err != nil {
		return err
	}
	return CreateDatabase(u)
}

// DropDatabase drops the database u names, ending its sessions.
func DropDatabase(u string) error {
	admin, name, err := adminOf(u)
	if err != nil {
		return err
	}
	return exec1(admin, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// CreateDatabase creates the database u names, empty.
func CreateDatabase(u string) error {
	admin, name, err := adminOf(u)
	if err != nil {
		return err
	}
	return exec1(admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

// adminOf returns the URL of the postgres database on u's server, and the
// name of u's database.
func adminOf(u string) (string, string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", "", fmt.Errorf("pgtest: %q: %w", redact(u), err)
	}
	name := strings.TrimPrefix(pu.Path, "/")
	if name == "" || name == "postgres" {
		return "", "", fmt.Errorf("pgtest: %s names no test database", redact(u))
	}
	admin, err := WithDatabase(u, "postgres")
	return admin, name, err
}

// Exec runs one SQL statement on the database u names.
func Exec(u, sql string, args ...any) error { return exec1(u, sql, args...) }

func exec1(u, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// redact drops the password from a URL for messages.
func redact(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return pu.Redacted()
}

// Server is a private PostgreSQL server started by a test: its own data
// directory, a free loopback port, trust authentication, fsync off (a
// commit survives a crash of the server, not one of the machine).
// It is stopped and its directory removed when the test ends.
type Server struct {
	t    testing.TB
	Port int
	dir  string
	bin  string
	cred *syscall.Credential // the postgres OS user, when the test runs as root
	cmd  *exec.Cmd
	exit chan struct{}
}

// StartServer initializes and starts a private server.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, bin: binDir(t)}
	dir, err := os.MkdirTemp("", "sluice-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() {
		s.Stop()
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root, a private server must run as the postgres OS user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	initdb := s.command("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	s.Port = freePort(t)
	s.Start()
	return s
}

// binDir finds the newest PostgreSQL server binaries.
func binDir(t testing.TB) string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i]
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatal("pgtest: PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin or $PATH; run ./scripts/test.sh, which installs postgresql")
	return ""
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// command is a PostgreSQL binary run as the server's user, in its own
// process group.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	return cmd
}

// URL returns the URL of database db on the server.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// NewDatabase creates an empty database on the server and returns its URL.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, s.URL("postgres"))
}

// Start starts the (stopped) server on its port and waits until it takes
// connections.
func (s *Server) Start() {
	s.t.Helper()
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = s.command("postgres", "-D", s.data(), "-p", strconv.Itoa(s.Port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
		"-c", "full_page_writes=off", "-c", "max_connections=100", "-c", "shared_buffers=16MB")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("pgtest: start postgres: %v", err)
	}
	exit := make(chan struct{})
	s.exit = exit
	go func(cmd *exec.Cmd) { cmd.Wait(); close(exit) }(s.cmd)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return
		}
		select {
		case <-exit:
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			s.t.Fatalf("pgtest: postgres exited at start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			s.t.Fatalf("pgtest: postgres on port %d not ready after 60s: %v\n%s", s.Port, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the server at once, like a crash (an immediate shutdown,
// SIGQUIT, as pg_ctl stop -m immediate sends): its connections break
// without a goodbye. It waits until the process has exited and the port
// refuses connections. Safe to call when stopped.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exit:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.exit:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exit
	}
	// The postmaster is gone; its backends follow within moments.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), 100*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
}
