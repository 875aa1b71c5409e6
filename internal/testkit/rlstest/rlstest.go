// Package rlstest serves the Envoy rate-limit API on loopback for the tests
// of its callers (a real rls.Server over an embedded memory store), and
// holds an envoyproxy/ratelimit configuration that tests of the API at
// every level replay, with the check of its answers.
package rlstest

import (
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// Serve serves the Envoy API with set in force, over an embedded memory
// store, on a free loopback port until the test ends, and returns its
// address. opts configure the gRPC server; register adds further services
// to it before it serves.
func Serve(t testing.TB, set *rules.Set, opts []grpc.ServerOption, register ...func(*grpc.Server)) string {
	t.Helper()
	return ServeOn(t, set, memory.DefaultConfig(), rls.Config{}, opts, register...)
}

// ServeOn is Serve over a memory store of config mc (its Clock, say), the
// server configured by cfg.
func ServeOn(t testing.TB, set *rules.Set, mc memory.Config, cfg rls.Config, opts []grpc.ServerOption, register ...func(*grpc.Server)) string {
	t.Helper()
	srv := rls.New(limitertest.Store(t, mc), cfg)
	srv.SetRules(limitertest.Compile(t, set))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	srv.Register(g)
	for _, r := range register {
		r(g)
	}
	go g.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}
