package rls_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/middleware"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// wireRequest is a RateLimitRequest written by hand, so that its strings
// may be what Envoy sends and protobuf-go would refuse to write: bytes
// that are not UTF-8.
type wireRequest []byte

// encodeRequest writes a RateLimitRequest in domain of one descriptor per
// list of key, value pairs.
func encodeRequest(domain string, descs ...[]string) wireRequest {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, kv := range descs {
		var d []byte
		for i := 0; i+1 < len(kv); i += 2 {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, kv[i])
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, kv[i+1])
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendBytes(d, e)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	return b
}

// wireCodec sends a wireRequest as it is and reads answers as proto.
type wireCodec struct{ base encoding.CodecV2 }

func (c wireCodec) Name() string { return "proto" }
func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(*wireRequest); ok {
		return mem.BufferSlice{mem.SliceBuffer(*w)}, nil
	}
	return c.base.Marshal(v)
}
func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

// callWire sends req as Envoy would, byte for byte; the error is the
// gRPC error Envoy would see.
func callWire(t *testing.T, conn *grpc.ClientConn, req wireRequest) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := new(rlsv3.RateLimitResponse)
	err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &req, resp,
		grpc.ForceCodecV2(wireCodec{base: encoding.GetCodecV2("proto")}))
	return resp, err
}

// TestCallerValuesDecide: every value a caller controls ends in a
// decision. Each value the issue lists — a path whose query runs past
// 4,096 bytes, a user or api_key of 257 bytes, a byte 0x7f, bytes that
// are not UTF-8 in path, user or api_key — is sent after its bucket is
// exhausted, and is OVER_LIMIT: no error Envoy would turn into "allow".
func TestCallerValuesDecide(t *testing.T) {
	long := strings.Repeat("u", 257)
	tests := []struct {
		name string
		kv   []string // the descriptor, beside remote_address
	}{
		{"long query", []string{"user", "alice", "method", "GET", "path", "/api/orders?q=" + strings.Repeat("x", 4100)}},
		{"user of 257 bytes", []string{"user", long, "method", "GET", "path", "/api/orders"}},
		{"api_key of 257 bytes", []string{"api_key", strings.Repeat("k", 257), "method", "GET", "path", "/api/orders"}},
		{"user with 0x7f", []string{"user", "al\x7fice", "method", "GET", "path", "/api/orders"}},
		{"api_key with 0x7f", []string{"api_key", "k\x7f", "method", "GET", "path", "/api/orders"}},
		{"path with 0x7f", []string{"user", "alice7f", "method", "GET", "path", "/api/orders\x7f"}},
		{"user not UTF-8", []string{"user", "al\xffice", "method", "GET", "path", "/api/orders"}},
		{"api_key not UTF-8", []string{"api_key", "k\xc3(", "method", "GET", "path", "/api/orders"}},
		{"path not UTF-8", []string{"user", "bob", "method", "GET", "path", "/api/orders/\xff"}},
		{"empty user", []string{"user", "", "api_key", "k-empty", "method", "GET", "path", "/api/orders"}},
		{"ip not an address", []string{"ip", "not-an-ip", "method", "GET", "path", "/api/orders"}},
		{"method in lower case", []string{"user", "carol", "method", "get", "path", "/api/orders"}},
		{"method odd", []string{"user", "dave", "method", "G\xffT", "path", "/api/orders"}},
		{"entry twice", []string{"user", "erin", "user", "frank", "method", "GET", "path", "/api/orders"}},
	}
	// The API keys are registered: an unknown one is no caller (see
	// TestUnregisteredAPIKeyIsNoCaller).
	clients := map[string]rules.Client{}
	for _, k := range []string{strings.Repeat("k", 257), "k\x7f", "k\xc3(", "k-empty"} {
		clients[string(identity.AppendAPIKey(nil, k))] = rules.Client{Plan: "free"}
	}
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "all", Match: rules.Match{Endpoint: "* /api/*"}, Limit: 1, Window: minute},
	}, Clients: clients})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := encodeRequest("edge", append([]string{"remote_address", "203.0.113.7"}, tt.kv...))
			for i, want := range []rlsv3.RateLimitResponse_Code{ok, over, over} {
				resp, err := callWire(t, e.conn, req)
				if err != nil {
					t.Fatalf("call %d: ShouldRateLimit = %v, want %v", i+1, err, want)
				}
				if resp.OverallCode != want {
					t.Fatalf("call %d: ShouldRateLimit = %v, want %v", i+1, resp.OverallCode, want)
				}
			}
		})
	}
}

// TestPathsFold: each spelling of /api/orders the gateway folded is, through
// the Envoy API, the same endpoint: after GET /api/orders has used its
// budget, every one of them is OVER_LIMIT.
func TestPathsFold(t *testing.T) {
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "orders", Match: rules.Match{Endpoint: "GET /api/orders"}, By: rules.ByIP, Limit: 1, Window: minute},
		{ID: "admin", Match: rules.Match{Endpoint: "GET /admin/*", PathCase: rules.PathCaseInsensitive}, By: rules.ByIP, Limit: 1, Window: minute},
	}})
	call := func(path string) *rlsv3.RateLimitResponse {
		return e.call(t, request("edge", desc("remote_address", "203.0.113.7", "method", "GET", "path", path)))
	}
	if resp := call("/api/orders"); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit.GetName() != "orders" {
		t.Fatalf("GET /api/orders = %v, want OK under orders", resp)
	}
	for _, p := range []string{"//api/orders", "/api/orders/", "/api//orders", "/api/./orders", "/api/x/../orders",
		"/api/%6frders", "/api%2Forders", "/api/orders;jsessionid=1", "/api/orders?page=2"} {
		if resp := call(p); resp.OverallCode != over {
			t.Errorf("GET %s = %v, want OVER_LIMIT under orders", p, resp.OverallCode)
		}
	}
	// /API/orders is another path for a case-sensitive rule...
	if resp := call("/API/orders"); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("GET /API/orders = %v, want OK with no rule: the orders rule keeps case", resp)
	}
	// ...and the same one for a rule with path_case insensitive.
	if resp := call("/admin/users"); resp.OverallCode != ok {
		t.Fatalf("GET /admin/users = %v, want OK", resp)
	}
	for _, p := range []string{"/ADMIN/users", "/Admin/Users/", "/%41dmin/x"} {
		if resp := call(p); resp.OverallCode != over {
			t.Errorf("GET %s = %v, want OVER_LIMIT under admin (path_case insensitive)", p, resp.OverallCode)
		}
	}
}

// TestHeadIsGet: a rule on GET applies to HEAD: once the GET budget is
// used, 20 HEADs are all OVER_LIMIT.
func TestHeadIsGet(t *testing.T) {
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "orders", Match: rules.Match{Endpoint: "GET /api/orders"}, By: rules.ByIP, Limit: 2, Window: minute},
	}})
	call := func(method string) rlsv3.RateLimitResponse_Code {
		return e.call(t, request("edge", desc("remote_address", "203.0.113.7", "method", method, "path", "/api/orders"))).OverallCode
	}
	for i := range 2 {
		if got := call("GET"); got != ok {
			t.Fatalf("GET %d = %v, want OK", i+1, got)
		}
	}
	for i := range 20 {
		if got := call("HEAD"); got != over {
			t.Fatalf("HEAD %d after the GET budget = %v, want OVER_LIMIT", i+1, got)
		}
	}
}

// TestOneBucketEveryEntryPoint: a caller with an odd identity — an API key
// of 300 bytes — is one bucket whether it arrives through the decision
// API, the Envoy API or the middleware, whatever spelling of the path it
// uses. The middleware trusts the key because the registry names it by
// its digest.
func TestOneBucketEveryEntryPoint(t *testing.T) {
	key := strings.Repeat("k", 300)
	sum := sha256.Sum256([]byte(key))
	id := "api_key:h:" + hex.EncodeToString(sum[:16])
	set := &rules.Set{
		Rules:   []rules.Rule{{ID: "orders", Match: rules.Match{Endpoint: "GET /api/orders"}, By: rules.ByAPIKey, Limit: 3, Window: minute}},
		Clients: map[string]rules.Client{id: {Plan: "free"}},
	}
	lim, st := limitertest.New(t, set, memory.DefaultConfig())
	srv := rls.New(st, rls.Config{})
	srv.SetRules(lim.Rules())
	api := server.New(lim, server.Config{})
	mw := middleware.Middleware(lim)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	// 1: the decision API, with the path spelled with an encoded slash.
	body := `{"api_key":"` + key + `","endpoint":"GET /api%2Forders?x=1"}`
	w := httptest.NewRecorder()
	api.ServeHTTP(w, httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(body)))
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"allowed":true,"limit":3,"remaining":2`) || !strings.Contains(w.Body.String(), `"client":"`+id+`"`) {
		t.Fatalf("decision API = %d %s, want allowed with 2 left, client %s", w.Code, w.Body, id)
	}
	// 2: the Envoy API, with a trailing slash.
	resp, err := srv.ShouldRateLimit(context.Background(), request("edge", desc("api_key", key, "method", "GET", "path", "/api/orders/")))
	if err != nil || resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("Envoy API = %v, %v, want OK with 1 left", resp, err)
	}
	// 3: the middleware, with a dot segment.
	r := httptest.NewRequest("GET", "/api/./orders", nil)
	r.Header.Set("X-API-Key", key)
	w = httptest.NewRecorder()
	mw.ServeHTTP(w, r)
	if w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("middleware = %d, remaining %q, want 200 with 0 left", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// The bucket is empty for all three.
	w = httptest.NewRecorder()
	api.ServeHTTP(w, httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(body)))
	if !strings.Contains(w.Body.String(), `"allowed":false`) {
		t.Errorf("decision API after = %d %s, want denied", w.Code, w.Body)
	}
	resp, err = srv.ShouldRateLimit(context.Background(), request("edge", desc("api_key", key, "method", "GET", "path", "/api/orders")))
	if err != nil || resp.OverallCode != over {
		t.Errorf("Envoy API after = %v, %v, want OVER_LIMIT", resp, err)
	}
	w = httptest.NewRecorder()
	mw.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("middleware after = %d, want 429", w.Code)
	}
	_ = bytes.MinRead
}
