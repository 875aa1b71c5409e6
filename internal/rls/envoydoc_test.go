package rls_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/sluicehq/sluice/internal/rls"
)

// TestEnvoyConfigInDocs parses the sample Envoy configuration of
// docs/envoy.md with Envoy's API definitions, validates it, and checks that
// its route builds descriptors of the entries sluice reads.
func TestEnvoyConfigInDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\nstatic_resources:")
	if !ok {
		t.Fatal("docs/envoy.md has no ```yaml block starting with static_resources:")
	}
	block, _, _ := strings.Cut(rest, "```")
	var tree any
	if err := yaml.Unmarshal([]byte("static_resources:"+block), &tree); err != nil {
		t.Fatalf("the sample configuration is not YAML: %v", err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("the sample configuration is not an Envoy v3 bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("the sample configuration does not validate: %v", err)
	}

	var hcm hcmv3.HttpConnectionManager
	if err := bs.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			for _, rl := range r.GetRoute().GetRateLimits() {
				for _, a := range rl.GetActions() {
					switch {
					case a.GetRemoteAddress() != nil:
						keys = append(keys, "remote_address")
					case a.GetRequestHeaders() != nil:
						if k := a.GetRequestHeaders().GetDescriptorKey(); k == rls.KeyUser {
							t.Errorf("the sample forwards the client's header %q as user", a.GetRequestHeaders().GetHeaderName())
						}
						keys = append(keys, a.GetRequestHeaders().GetDescriptorKey())
					case a.GetMetadata() != nil:
						// The user: from a verified token's claim, never
						// from a header the client sends.
						m := a.GetMetadata()
						if m.GetDescriptorKey() == rls.KeyUser && m.GetMetadataKey().GetKey() != "envoy.filters.http.jwt_authn" {
							t.Errorf("the sample's user comes from metadata %q, want jwt_authn's", m.GetMetadataKey().GetKey())
						}
						keys = append(keys, m.GetDescriptorKey())
					}
				}
			}
		}
	}
	for _, k := range keys {
		if !slices.Contains([]string{rls.KeyUser, rls.KeyAPIKey, rls.KeyRemoteAddress, rls.KeyIP, rls.KeyPlan, rls.KeyMethod, rls.KeyPath}, k) {
			t.Errorf("the sample route sends descriptor key %q, which sluice does not read", k)
		}
	}
	if len(keys) != 5 {
		t.Errorf("the sample route sends the keys %v, want remote_address, user, api_key, method, path", keys)
	}
}
