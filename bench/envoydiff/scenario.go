package main

import (
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A scenario is a sequence of ShouldRateLimit calls sent to both services
// in order, each call to one and then the other before the next.
type scenario struct {
	name string
	// from says where the sequence comes from (a test or script of
	// envoyproxy/ratelimit, or a feature the issue lists).
	from string
	// second: the calls depend on a per-second window, so the scenario
	// starts at the beginning of a second.
	second bool
	calls  []call
}

type call struct {
	req *rlsv3.RateLimitRequest
	// wait before the call (a window ticking down).
	wait time.Duration
}

// d is a descriptor of key, value pairs.
func d(kv ...string) *ratelimitv3.RateLimitDescriptor {
	out := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// hits sets the descriptor's own hits_addend.
func hits(n uint64, x *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	x.HitsAddend = wrapperspb.UInt64(n)
	return x
}

// own sets the descriptor's own limit (Envoy's dynamic limits).
func own(rpu uint32, unit typev3.RateLimitUnit, x *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	x.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return x
}

func req(domain string, ds ...*ratelimitv3.RateLimitDescriptor) call {
	return call{req: &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}}
}

// reqHits is req with the request's hits_addend.
func reqHits(domain string, n uint32, ds ...*ratelimitv3.RateLimitDescriptor) call {
	c := req(domain, ds...)
	c.req.HitsAddend = n
	return c
}

func times(n int, c call) []call {
	out := make([]call, n)
	for i := range out {
		out[i] = c
	}
	return out
}

func seq(parts ...[]call) []call {
	var out []call
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(c call) []call { return []call{c} }

func waited(w time.Duration, c call) call {
	c.wait = w
	return c
}

// scenarios returns every sequence, its values made unique by run where the
// configuration has a key without a value (so a second run on the same
// Redis starts from fresh counters there). Fixed values (source_cluster:
// proxy, service: service_1 …) need fresh services on a flushed Redis.
func scenarios(run string) []scenario {
	u := func(s string) string { return s + "-" + run }
	twoheader := func(foo, bar, baz string) call {
		var ds []*ratelimitv3.RateLimitDescriptor
		if bar != "" {
			ds = append(ds, d("foo", foo, "bar", bar))
		}
		if baz != "" {
			ds = append(ds, d("foo", foo, "baz", baz))
		}
		return req("rl", ds...)
	}
	fourheader := func(foo, bar, src, dst string) call {
		return req("rl", d("foo", foo, "bar", bar), d("source_cluster", src, "destination_cluster", dst))
	}
	fiveheader := func(foo, bar, src, dst, cat string) call {
		return req("rl", d("foo", foo, "bar", bar), d("source_cluster", src, "destination_cluster", dst), d("category", cat))
	}
	tokenCheck := req("charge", hits(0, d("service", "service_2")))
	tokenCharge := req("charge", hits(1, d("service", "service_2")))
	tok := u("tok")
	check4 := req("charge", hits(0, d("tokens", tok)))
	charge4 := req("charge", hits(4, d("tokens", tok)))
	return []scenario{
		{name: "unknown domain", from: "integration_test.go testBasicBaseConfig",
			calls: one(req("foo", d("hello", "world")))},
		{name: "key1 per second", from: "integration_test.go testBasicBaseConfig", second: true,
			calls: times(3, req("basic", d("key1", u("foo"))))},
		{name: "key2 25 calls against 20/min", from: "integration_test.go testBasicBaseConfig",
			calls: times(25, req("another", d("key2", u("r1"))))},
		{name: "key2+key3 15 calls, two descriptors", from: "integration_test.go testBasicBaseConfig",
			calls: times(15, req("another", d("key2", u("r2")), d("key3", u("r2"))))},
		{name: "key4 duration ticks down", from: "integration_test.go testBasicBaseConfig",
			calls: []call{req("another", d("key4", u("durTest"))), waited(2*time.Second, req("another", d("key4", u("durTest"))))}},
		{name: "reload domain: block 0/s, key1, one_per_minute", from: "integration_test.go testConfigReload", second: true,
			calls: seq(times(2, req("reload", d("block", u("foo")))), one(req("reload", d("key1", u("foo")))),
				times(2, req("reload", d("one_per_minute", u("foo")))))},
		{name: "share_threshold: files/* shares one bucket", from: "integration_test.go testShareThreshold",
			calls: seq(times(10, req("share-threshold-test", d("files", "files/a.pdf"))),
				one(req("share-threshold-test", d("files", "files/b.csv"))),
				one(req("share-threshold-test", d("files", "files/c"))))},
		{name: "share_threshold off: each value its own", from: "integration_test.go testShareThreshold",
			calls: []call{req("share-threshold-test", d("files_no_share", "files_no_share/"+u("1"))),
				req("share-threshold-test", d("files_no_share", "files_no_share/"+u("2"))),
				req("share-threshold-test", d("files_no_share", "files_no_share/"+u("1")))}},
		{name: "share_threshold on a wildcard with nested descriptors", from: "share_threshold",
			calls: seq(times(2, req("share-threshold-test", d("tenant", "t-"+u("a"), "op", "read"))),
				times(2, req("share-threshold-test", d("tenant", "t-"+u("b"), "op", "read"))),
				one(req("share-threshold-test", d("tenant", "t-"+u("c"), "op", "write"))))},
		{name: "simple-get", from: "integration-test/scripts/simple-get.sh", second: true,
			calls: one(twoheader(u("test"), "", "shady"))},
		{name: "trigger-ratelimit", from: "integration-test/scripts/trigger-ratelimit.sh",
			calls: times(5, twoheader(u("pelle"), "", "not-so-shady"))},
		{name: "shadow mode", from: "integration-test/scripts/trigger-shadow-mode-key.sh",
			calls: times(6, twoheader(u("pelle2"), "", "shady"))},
		{name: "replaces: raises a 0 limit", from: "integration-test/scripts/replaces.sh",
			calls: seq(one(twoheader(u("bk"), "banned", "")),
				one(fourheader(u("bk"), "banned", "proxy", "mock")),
				times(3, fourheader(u("bk"), "banned", "proxy", "override")))},
		{name: "replaces: the original limit stays", from: "integration-test/scripts/replaces.sh",
			calls: seq(times(3, fourheader(u("my_foo"), "bkthomps", "proxy", "bkthomps")),
				times(2, fourheader(u("my_foo"), "bkthomps", "proxy", "not_bkthomps")),
				one(fourheader(u("my_foo"), "bkthomps", "proxy", "bkthomps")))},
		{name: "replaces: several names", from: "integration-test/scripts/replaces.sh",
			calls: seq(times(5, fiveheader(u("my_foo2"), "bkthomps", "proxy", "fake", "account")),
				times(2, twoheader(u("foo_2"), "bkthomps", "")),
				times(3, fourheader(u("foo_3"), "bar_3", "proxy", "fake")),
				one(fiveheader(u("my_foo2"), "bkthomps", "proxy", "fake", "account")))},
		{name: "detailed_metric key", from: "integration-test/scripts/value-included-in-stats-key-when-unspecified.sh",
			calls: times(3, req("rl", d("unspec", u("unspecified_value"))))},
		{name: "quota_mode: two quota descriptors", from: "integration-test/scripts/quota.sh",
			calls: times(4, req("rl", d("service", "service_1"), d("service", "service_2")))},
		{name: "unlimited", from: "rl: bay, qux",
			calls: seq(times(2, req("rl", d("qux", u("q")))), times(2, req("rl", d("foo", u("f"), "bay", "x"))))},
		{name: "charge after response: token-quota", from: "integration-test/scripts/token-quota.sh",
			calls: seq(one(tokenCheck), one(tokenCharge), one(tokenCheck), one(tokenCharge), one(tokenCheck), one(tokenCharge),
				one(tokenCheck), one(tokenCharge), one(tokenCheck))},
		{name: "charge after response: 4 tokens a call against 10", from: "issue: charge after response",
			calls: seq(one(check4), one(charge4), one(check4), one(charge4), one(check4), one(charge4),
				one(check4), one(charge4), one(check4))},
		{name: "hits_addend > 1 on the request", from: "hits_addend",
			calls: times(5, reqHits("charge", 3, d("cost", u("h3"))))},
		{name: "hits_addend on the descriptor wins over the request's", from: "hits_addend",
			calls: seq(times(2, reqHits("charge", 1, hits(4, d("cost", u("h4"))))), one(req("charge", hits(0, d("cost", u("h4"))))),
				one(reqHits("charge", 9, hits(2, d("cost", u("h4"))))), one(req("charge", hits(0, d("cost", u("h4"))))),
				one(req("charge", d("cost", u("h4")))))},
		{name: "hits_addend 0 checks without taking", from: "hits_addend",
			calls: seq(times(2, req("charge", hits(0, d("cost", u("h0"))))), times(11, req("charge", d("cost", u("h0")))),
				times(2, req("charge", hits(0, d("cost", u("h0"))))))},
		{name: "hits_addend past the limit", from: "hits_addend",
			calls: seq(one(req("charge", hits(11, d("cost", u("big"))))), one(req("charge", d("cost", u("big")))),
				one(reqHits("charge", 10, d("cost", u("big2")))), one(req("charge", d("cost", u("big2")))))},
		{name: "every unit", from: "units", second: true,
			calls: seq(times(4, req("units", d("u", "second"))), times(4, req("units", d("u", "minute"))),
				times(4, req("units", d("u", "hour"))), times(4, req("units", d("u", "day"))),
				times(4, req("units", d("u", "week"))), times(4, req("units", d("u", "month"))),
				times(4, req("units", d("u", "year"))), times(2, req("units", d("big", u("b")))))},
		{name: "a descriptor's own limit", from: "dynamic limits",
			calls: seq(times(3, req("another", own(2, typev3.RateLimitUnit_MINUTE, d("key2", u("own"))))),
				one(req("another", own(2, typev3.RateLimitUnit_HOUR, d("key2", u("own2"))))),
				one(req("another", own(0, typev3.RateLimitUnit_MINUTE, d("key2", u("own3"))))))},
		{name: "wildcards: final * and * inside", from: "wildcards",
			calls: seq(times(4, req("wild", d("path", "/v1/"+u("a")))), one(req("wild", d("path", "/v1/"+u("b")))),
				times(3, req("wild", d("path", "/v2/"+u("x")+"/export"))),
				one(req("wild", d("path", "/v2/"+u("x")+"/y/export"))),
				times(2, req("wild", d("path", "/v3/"+u("z")))))},
		{name: "empty values", from: "empty values",
			calls: seq(times(3, req("wild", d("e", ""))), times(2, req("wild", d("client", ""))),
				one(req("another", d("key2", ""))))},
		{name: "nested descriptors, no limit of their own", from: "rl-style trees",
			calls: seq(times(2, req("wild", d("nest", u("n")))), times(3, req("wild", d("nest", u("n"), "leaf", "l"))),
				times(2, req("wild", d("bare", u("v")))))},
		{name: "unlimited value next to a limited key", from: "wildcards",
			calls: seq(times(3, req("wild", d("client", "internal"))), times(3, req("wild", d("client", u("c")))))},
		{name: "empty descriptors", from: "empty descriptors",
			calls: seq(times(2, req("another", d())), times(2, req("another", d(), d("key3", u("empty")))))},
		{name: "several descriptors, one denies", from: "several descriptors",
			calls: seq(times(2, req("basic", d("one_per_minute", u("m")), d("key1", u("k")))),
				one(req("basic", d("key1", u("k")))))},
		{name: "one descriptor twice", from: "several descriptors",
			calls: times(6, req("another", d("key3", u("twice")), d("key3", u("twice"))))},
		{name: "descriptors of several keys and domains' rules", from: "several descriptors",
			calls: times(4, req("rl", d("foo", u("s1")), d("foo", u("s1"), "bar", "x"), d("unspec", u("s1")), d("qux", "1")))},
		{name: "invalid requests", from: "errors",
			calls: []call{req(""), req("rl"), req("rl", d("", "x")), req("", d("foo", "x"))}},
	}
}
