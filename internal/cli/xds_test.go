package cli

import (
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

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
