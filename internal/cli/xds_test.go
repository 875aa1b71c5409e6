package cli

import (
	"context"
	"net"
	"strconv"
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

// testXDS is an xDS management server built with go-control-plane: ADS
// over a snapshot cache keyed by node id, as Envoy Gateway serves
// envoyproxy/ratelimit.
type testXDS struct {
	addr  string
	cache cache.SnapshotCache
	g     *grpc.Server
}

func newXDS(t *testing.T, addr string) *testXDS {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the same address again after a restart
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	x := &testXDS{addr: ln.Addr().String(), cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil), g: grpc.NewServer()}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(x.g, serverv3.NewServer(context.Background(), x.cache, nil))
	go x.g.Serve(ln)
	t.Cleanup(x.g.Stop)
	return x
}

func (x *testXDS) set(t *testing.T, node string, version int, confs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	var res []types.Resource
	for _, c := range confs {
		res = append(res, c)
	}
	snap, err := cache.NewSnapshot(strconv.Itoa(version), map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

const egRoute = "httproute/default/backend/rule/0/match/0/www_example_com"

// egLimit is a RateLimitConfig shaped as Envoy Gateway generates one for
// a listener (internal/xds/translator): named and domained after it, the
// route's descriptor, the rule's match below it, and the limit per client
// IP (a distinct remote_address), n a minute.
func egLimit(listener string, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: listener, Domain: listener, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: egRoute, Value: egRoute, Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "rule-0-match-0", Value: "rule-0-match-0", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}},
			}},
		}},
	}}
}
