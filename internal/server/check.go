package server

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/flatjson"
	"github.com/sluicehq/sluice/internal/jsonhttp"
	planname "github.com/sluicehq/sluice/internal/plan"
	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/limiter"
)

// Limits on the fields of a check request. user, api_key, ip and the
// endpoint's path have none: whatever a caller sends there is decided (see
// ParseCheck), within the body's size limit.
const (
	MaxPlan = planname.MaxLen // bytes of plan
	MaxCost = 1000000000      // largest cost, as algorithm.MaxLimit
)

// CheckRequest is the body of POST /ratelimit/check (docs/api.md):
//
//	{"user":"alice","api_key":"k_live_42","ip":"203.0.113.7",
//	 "plan":"free","endpoint":"GET /api/orders","cost":1}
//
// Empty strings and JSON null mean the field is absent.
type CheckRequest struct {
	User     string `json:"user,omitempty"`
	APIKey   string `json:"api_key,omitempty"`
	IP       string `json:"ip,omitempty"`
	Plan     string `json:"plan,omitempty"`
	Endpoint string `json:"endpoint,omitempty"` // "METHOD /path", or ""
	Cost     int64  `json:"cost"`               // 1..MaxCost; 1 when absent

	// Method and Path are the parts of Endpoint, as given: the limiter
	// drops the query and cleans the path (urlpath.Clean).
	Method string `json:"-"`
	Path   string `json:"-"`
}

// limiterRequest is the call r asks about, for the limiter.
func (r *CheckRequest) limiterRequest() limiter.Request {
	return limiter.Request{User: r.User, APIKey: r.APIKey, IP: r.IP, Plan: r.Plan,
		Method: r.Method, Path: r.Path, Cost: r.Cost}
}

// ParseCheck parses and validates a check request body. It is strict
// about the request's shape, which the integrating service decides: the
// body is one JSON object with no unknown or repeated keys and nothing
// after it; at least one of user, api_key and ip is set; plan is 1 to 64 of
// A-Z a-z 0-9 . _ - starting with a letter or digit; endpoint is "METHOD
// path", a method and a path separated by the first space; cost is a whole
// number from 1 to 1e9 written without fraction or exponent. The error is
// an *jsonhttp.APIError (400, "invalid_request") whose message names the field.
//
// The values a caller of the integrating service controls are never
// refused: user, api_key and ip may be any string (one too long or odd is
// keyed by its digest, see package identity), the method any word (rules
// compare it without regard to case), and the path anything (the limiter
// drops its query and cleans it, see urlpath.Clean).
//
// The returned strings do not alias body.
func ParseCheck(body []byte) (CheckRequest, error) {
	var req CheckRequest
	var esc []byte
	err := parseCheck(bytes.Clone(body), &esc, &req)
	return req, err
}

// parseCheck parses b into dst with the hand-written tokenizer. The strings
// of dst alias b and *esc (where escaped strings are decoded): they are
// valid as long as neither is reused.
func parseCheck(b []byte, esc *[]byte, dst *CheckRequest) error {
	return parseBody(false, b, esc, dst, nil)
}

// parseBody parses b into dst, as parseCheck — with encoding/json when std
// (Config.JSONDecoder) — and, when wait is not nil, for a reserve body,
// max_wait_ms into *wait.
func parseBody(std bool, b []byte, esc *[]byte, dst *CheckRequest, wait *int64) error {
	var r flatjson.Fields
	keys := checkKeys
	if wait != nil {
		keys = reserveKeys
	}
	var err error
	if std {
		err = flatjson.Decode(b, keys, &r)
	} else {
		err = flatjson.Parse(b, keys, esc, &r)
	}
	if err != nil {
		return bodyErr(err)
	}
	if err := validate(&r, dst); err != nil {
		return err
	}
	if wait != nil {
		*wait, err = maxWait(&r)
	}
	return err
}

// The keys of a check request, in the order they are validated.
const (
	fUser = iota
	fAPIKey
	fIP
	fPlan
	fEndpoint
	fCost
	nCheckFields                // the keys above are a check's
	fMaxWait     = nCheckFields // a reserve body's too
	nFields      = fMaxWait + 1
)

var fieldNames = [nFields]string{"user", "api_key", "ip", "plan", "endpoint", "cost", "max_wait_ms"}

// fieldOf is the index of a key, or -1.
func fieldOf(key string) int {
	switch key {
	case "user":
		return fUser
	case "api_key":
		return fAPIKey
	case "ip":
		return fIP
	case "plan":
		return fPlan
	case "endpoint":
		return fEndpoint
	case "cost":
		return fCost
	case "max_wait_ms":
		return fMaxWait
	}
	return -1
}

// The keys of a check body and of a reserve body.
var (
	checkKeys   = flatjson.NewKeys(fieldOf, fieldNames[:nCheckFields]...)
	reserveKeys = flatjson.NewKeys(fieldOf, fieldNames[:]...)
)

// bodyErr is the API error of the tokenizer's err.
func bodyErr(err error) error {
	switch e := err.(type) {
	case *flatjson.Error:
		return invalid(e.Msg)
	case *flatjson.TypeError:
		return typeErr(e.Key, e.Kind)
	}
	if err == flatjson.ErrEmpty {
		return invalid(`request body is empty; want a JSON object such as {"user":"alice","endpoint":"GET /api/orders"}`)
	}
	return err
}

// validate checks the fields r the tokenizer read and fills dst.
func validate(r *flatjson.Fields, dst *CheckRequest) error {
	var s [nFields - 1]string
	for f := range fCost {
		switch r.Kind[f] {
		case flatjson.Absent, flatjson.Null:
		case flatjson.String:
			s[f] = r.Text[f]
		default:
			return typeErr(f, r.Kind[f])
		}
	}
	user, apiKey, ip, plan, endpoint := s[fUser], s[fAPIKey], s[fIP], s[fPlan], s[fEndpoint]
	if plan != "" && !planname.Valid(plan) {
		return invalid("plan: must be 1 to 64 of A-Z a-z 0-9 . _ - starting with a letter or digit, got " + quote.Short(plan))
	}
	var method, path string
	if endpoint != "" {
		var err error
		if method, path, err = parseEndpoint(endpoint); err != nil {
			return err
		}
	}
	cost := int64(1)
	switch r.Kind[fCost] {
	case flatjson.Absent, flatjson.Null:
	case flatjson.Number:
		var err error
		if cost, err = parseCost(r.Text[fCost]); err != nil {
			return err
		}
	default:
		return typeErr(fCost, r.Kind[fCost])
	}
	if user == "" && apiKey == "" && ip == "" {
		return invalid("want at least one of user, api_key, ip")
	}
	*dst = CheckRequest{User: user, APIKey: apiKey, IP: ip, Plan: plan, Endpoint: endpoint, Cost: cost, Method: method, Path: path}
	return nil
}

func typeErr(f int, k flatjson.Kind) *jsonhttp.APIError {
	want := "a string"
	if f == fCost || f == fMaxWait {
		want = "a whole number"
	}
	return invalid(fieldNames[f] + ": must be " + want + ", got " + k.String())
}

const endpointForm = `want "METHOD /path", e.g. "GET /api/orders"`

// parseEndpoint splits "METHOD path" at its first space. The path is
// returned as given.
func parseEndpoint(s string) (method, path string, err error) {
	method, path, ok := strings.Cut(s, " ")
	if !ok || method == "" {
		return "", "", invalid("endpoint: " + endpointForm + ", got " + quote.Short(s))
	}
	return method, path, nil
}

// parseCost parses a JSON number literal as a cost.
func parseCost(lit string) (int64, error) {
	if strings.ContainsAny(lit, ".eE") {
		return 0, invalid("cost: must be a whole number written without fraction or exponent, got " + lit)
	}
	if lit[0] == '-' {
		return 0, invalid("cost: must be at least 1, got " + lit)
	}
	if len(lit) > len("1000000000") {
		return 0, invalid("cost: must be at most " + strconv.Itoa(MaxCost) + ", got " + quote.Short(lit))
	}
	var n int64
	for i := 0; i < len(lit); i++ {
		n = n*10 + int64(lit[i]-'0')
	}
	switch {
	case n < 1:
		return 0, invalid("cost: must be at least 1, got " + lit)
	case n > MaxCost:
		return 0, invalid("cost: must be at most " + strconv.Itoa(MaxCost) + ", got " + lit)
	}
	return n, nil
}

func invalid(msg string) *jsonhttp.APIError {
	return &jsonhttp.APIError{Status: 400, Code: CodeInvalidRequest, Message: msg}
}
