// Package xdstest runs an xDS management server built with
// go-control-plane, as Envoy Gateway serves envoyproxy/ratelimit: an ADS
// server over a snapshot cache keyed by node id, on loopback, for tests of
// sluice's xDS config source (CONFIG_TYPE=GRPC_XDS_SOTW).
package xdstest

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

// Server is a running xDS management server; it stops when the test ends,
// or at Stop.
type Server struct {
	Addr  string
	cache cache.SnapshotCache
	g     *grpc.Server

	mu    sync.Mutex
	nacks []string // error details of the NACKs received
}

// Start serves on addr ("127.0.0.1:0" for any port; an address a stopped
// Server had, to restart it there: it is tried again for a second while
// the old listener lets it go).
func Start(t testing.TB, addr string) *Server {
	t.Helper()
	s := &Server{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		if d := req.GetErrorDetail(); d != nil {
			s.mu.Lock()
			s.nacks = append(s.nacks, d.GetMessage())
			s.mu.Unlock()
		}
		return nil
	}}
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	s.g = grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.g, serverv3.NewServer(context.Background(), s.cache, cb))
	go s.g.Serve(ln)
	t.Cleanup(s.g.Stop)
	return s
}

// Set puts confs in the snapshot of node, at version.
func (s *Server) Set(t testing.TB, node string, version int, confs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	var res []types.Resource
	for _, c := range confs {
		res = append(res, c)
	}
	snap, err := cache.NewSnapshot(strconv.Itoa(version), map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// Nacked returns the error details of the NACKs received so far.
func (s *Server) Nacked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nacks...)
}

// Stop stops the server at once, as a crash would.
func (s *Server) Stop() { s.g.Stop() }
