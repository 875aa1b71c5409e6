package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestZeroConfigDefaults: a Config of addresses only is DefaultConfig's:
// the denial cache is on (it was silently off, the zero of its switch).
func TestZeroConfigDefaults(t *testing.T) {
	srv := redistest.Start(t)
	s, err := sredis.New(t.Context(), sredis.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	op := limiter.Op{Client: "user:zero", Rule: "r", Params: paramsOf(algorithm.TokenBucket, 1, conformance.Hour), Cost: 1}
	take(t, s, op)
	take(t, s, op) // denied by Redis, with a wait
	if _, info := take(t, s, op); info.Origin != limiter.OriginLocalDenialCache {
		t.Errorf("third call of a bucket Redis denied, zero Config: source %s, want the local denial cache", info.Origin)
	}
}

// TestConfigValidate: a field that cannot work is refused by name.
func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		edit func(*sredis.Config)
		want string
	}{
		{func(c *sredis.Config) { c.Addrs = nil }, "Addrs"},
		{func(c *sredis.Config) { c.DialTimeout = -time.Second }, "DialTimeout"},
		{func(c *sredis.Config) { c.MaxBatch = -1 }, "MaxBatch"},
		{func(c *sredis.Config) { c.BatchConcurrency = -1 }, "BatchConcurrency"},
		{func(c *sredis.Config) { c.BatchFill = -1 }, "BatchFill"},
		{func(c *sredis.Config) { c.BatchWait = time.Second }, "BatchWait"},
		{func(c *sredis.Config) { c.FlushDelay = -1 }, "FlushDelay"},
	} {
		cfg := sredis.Config{Addrs: []string{"127.0.0.1:1"}}
		tt.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate() = %v, want an error naming %s", err, tt.want)
		}
		if _, err := sredis.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New() = %v, want an error naming %s", err, tt.want)
		}
	}
	if err := (sredis.Config{Addrs: []string{"127.0.0.1:1"}}).Validate(); err != nil {
		t.Errorf("Validate() of addresses only = %v, want nil", err)
	}
}

// TestNewReturnsScriptLoadErrors: a user the server does not allow to
// load scripts gets an error from New naming SCRIPT LOAD, not a store
// whose every call fails.
func TestNewReturnsScriptLoadErrors(t *testing.T) {
	srv := redistest.Start(t)
	do(t, srv, "acl", "setuser", "noscript", "on", ">pw", "~*", "+@all", "-script")
	_, err := sredis.New(t.Context(), sredis.Config{Addrs: []string{srv.Addr()}, Username: "noscript", Password: "pw"})
	if err == nil || !strings.Contains(err.Error(), "SCRIPT LOAD") {
		t.Fatalf("New as a user without SCRIPT = %v, want an error naming SCRIPT LOAD", err)
	}
}
