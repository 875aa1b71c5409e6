package pgtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func query(t *testing.T, u string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func TestNewDatabase(t *testing.T) {
	u := NewDatabase(t)
	if err := query(t, u); err != nil {
		t.Fatalf("query on %s: %v", u, err)
	}
}

// TestServerStopStart: a private server answers, refuses connections
// while stopped, and keeps its data across a restart.
func TestServerStopStart(t *testing.T) {
	s := StartServer(t)
	u := s.NewDatabase(t)
	if err := Exec(u, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := query(t, u); err == nil {
		t.Fatal("query on a stopped server = nil error, want a connection error")
	}
	s.Start()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after restart: SELECT v = %d, %v; want 42, nil", v, err)
	}
}

// TestReplace: a replaced database is empty and keeps its name; its open
// sessions are ended.
func TestReplace(t *testing.T) {
	u := NewDatabase(t)
	if err := Exec(u, "CREATE TABLE gone (v int)"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	if err := Replace(u); err != nil {
		t.Fatalf("Replace: %v", err)
	}
	if err := held.Ping(ctx); err == nil {
		t.Error("a session of the dropped database still answers")
	}
	if err := Exec(u, "SELECT * FROM gone"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("SELECT from a table of the replaced database = %v, want does not exist", err)
	}
}
