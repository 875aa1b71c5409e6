package rulestore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// TestPostgresNoSuchDatabase: a --rules URL naming a database that does
// not exist is one error that says so and how to fix it, not a WARN that
// it is retrying followed by an exit.
func TestPostgresNoSuchDatabase(t *testing.T) {
	url := strings.Replace(pgtest.AdminURL(), "/postgres?", "/sluice_no_such_db?", 1)
	var logs bytes.Buffer
	_, err := OpenPostgres(context.Background(), PostgresConfig{URL: url, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil || !strings.Contains(err.Error(), `database "sluice_no_such_db" does not exist`) || !strings.Contains(err.Error(), `CREATE DATABASE "sluice_no_such_db"`) {
		t.Errorf("OpenPostgres(no such database) = %v, want an error naming the database and CREATE DATABASE", err)
	}
	if logs.Len() != 0 {
		t.Errorf("OpenPostgres(no such database) logged besides its error:\n%s", logs.String())
	}
}
