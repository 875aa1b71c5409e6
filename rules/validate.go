package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/clientkey"
	"github.com/sluicehq/sluice/internal/plan"
	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/internal/ruleid"
)

// Validate checks every field of r and returns a *FieldError naming the
// first one that is wrong, or nil.
func (r *Rule) Validate() error {
	if err := validID(r.ID); err != nil {
		return err
	}
	if err := validText("description", r.Description, maxDescription); err != nil {
		return err
	}
	if r.Match.Domain != "" {
		if msg := domainProblem(r.Match.Domain); msg != "" {
			return fieldErr(msg, "match", "domain")
		}
	}
	if r.Match.Plan != "" {
		if msg := planProblem(r.Match.Plan); msg != "" {
			return fieldErr(msg, "match", "plan")
		}
	}
	if r.Match.Endpoint != "" {
		if _, err := parseEndpoint(r.Match.Endpoint); err != nil {
			return fieldErr(err.(*FieldError).Message, "match", "endpoint")
		}
	}
	switch {
	case !r.Match.PathCase.Valid():
		return fieldErr(fmt.Sprintf("must be sensitive or insensitive, got %q", string(r.Match.PathCase)), "match", "path_case")
	case r.Match.PathCase != "" && r.Match.Endpoint == "":
		return fieldErr("applies to the path of match.endpoint: add an endpoint or remove path_case", "match", "path_case")
	}
	if len(r.Match.Entries) > 0 {
		if err := validEntries(r.Match.Entries); err != nil {
			return err
		}
		if r.Match.Plan != "" || r.Match.Endpoint != "" {
			return fieldErr("a rule on descriptor entries (Envoy API) names no plan or endpoint; remove them or make two rules", "match", "entries")
		}
	}
	if len(r.Match.Headers) > 0 {
		if err := validHeaders(r.Match.Headers); err != nil {
			return err
		}
		switch {
		case len(r.Match.Entries) > 0:
			return fieldErr("a rule on descriptor entries (Envoy API) sees no request headers; remove headers or make two rules", "match", "headers")
		case r.Match.Domain != "":
			return fieldErr("calls in an Envoy domain carry no request headers (only the gateway and the middleware see them); remove headers or domain", "match", "headers")
		}
	}
	if _, err := parseBy(r.By); err != nil {
		return err
	}
	if !r.Algorithm.Valid() {
		return fieldErr(fmt.Sprintf("unknown algorithm %s, want one of %s", r.Algorithm, validAlgorithmSet), "algorithm")
	}
	if err := r.validateNames(); err != nil {
		return err
	}
	if r.Unlimited {
		switch {
		case r.Limit != 0:
			return fieldErr(fmt.Sprintf("an unlimited rule admits every call: remove limit (got %d) or unlimited", r.Limit), "limit")
		case r.Window != 0:
			return fieldErr(fmt.Sprintf("an unlimited rule admits every call: remove window (got %s) or unlimited", r.Window), "window")
		case r.Burst != 0:
			return fieldErr(fmt.Sprintf("an unlimited rule admits every call: remove burst (got %d) or unlimited", r.Burst), "burst")
		case r.MaxReserveWait != 0:
			return fieldErr(fmt.Sprintf("an unlimited rule has no budget to reserve from: remove max_reserve_wait (got %s) or unlimited", r.MaxReserveWait), "max_reserve_wait")
		case r.Charge == ChargeAfterResponse:
			return fieldErr("an unlimited rule counts nothing, so it takes no charge: remove charge or unlimited", "charge")
		case r.Charge != "" && r.Charge != ChargeRequest:
			return fieldErr(fmt.Sprintf("must be request or after_response, got %q", string(r.Charge)), "charge")
		}
		if !r.FailureMode.Valid() {
			return fieldErr(fmt.Sprintf("must be open or closed, got %q", string(r.FailureMode)), "failure_mode")
		}
		if !r.Lease.Valid() {
			return fieldErr(fmt.Sprintf("must be auto, off or on, got %q", string(r.Lease)), "lease")
		}
		return nil
	}
	switch {
	case r.Limit < 0:
		return fieldErr(fmt.Sprintf("must be ≥ 0 (0 denies every call), got %d", r.Limit), "limit")
	case r.Algorithm == algorithm.FixedWindow && r.Limit > algorithm.MaxFixedWindowLimit:
		return fieldErr(fmt.Sprintf("must be ≤ %d for fixed_window, got %d", int64(algorithm.MaxFixedWindowLimit), r.Limit), "limit")
	case r.Algorithm != algorithm.FixedWindow && r.Limit > maxLimit:
		return fieldErr(fmt.Sprintf("must be ≤ %d, got %d (fixed_window takes up to %d)", maxLimit, r.Limit, int64(algorithm.MaxFixedWindowLimit)), "limit")
	case r.Algorithm == algorithm.SlidingLog && r.Limit > algorithm.MaxLogLimit:
		return fieldErr(fmt.Sprintf("must be ≤ %d for sliding_log, which stores one timestamp per admitted call (use sliding_window for larger limits), got %d",
			algorithm.MaxLogLimit, r.Limit), "limit")
	}
	w := time.Duration(r.Window)
	switch {
	case w == 0:
		return fieldErr(`required, e.g. "1m"`, "window")
	case w < minWindow:
		return fieldErr(fmt.Sprintf("must be ≥ 1ms, got %s", r.Window), "window")
	case w > maxWindow:
		return fieldErr(fmt.Sprintf("must be ≤ 366d, got %s", r.Window), "window")
	case w%time.Microsecond != 0:
		return fieldErr(fmt.Sprintf("must be a whole number of microseconds, got %s", r.Window), "window")
	}
	switch {
	case r.Limit == 0 && r.Burst != 0:
		return fieldErr(fmt.Sprintf("a rule of limit 0 denies every call: remove burst (got %d)", r.Burst), "burst")
	case r.Burst < 0:
		return fieldErr(fmt.Sprintf("must be ≥ 0 (0 = default), got %d", r.Burst), "burst")
	case r.Burst > maxLimit:
		return fieldErr(fmt.Sprintf("must be ≤ %d, got %d", maxLimit, r.Burst), "burst")
	case r.Burst > 0 && r.Algorithm != algorithm.TokenBucket && r.Algorithm != algorithm.LeakyBucket:
		return fieldErr(fmt.Sprintf("only token_bucket and leaky_bucket take a burst; %s admits limit calls per window (remove burst or change the algorithm)", r.Algorithm), "burst")
	}
	switch r.Charge {
	case "", ChargeRequest:
	case ChargeAfterResponse:
		if !algorithm.CanCharge(r.Algorithm) {
			return fieldErr(fmt.Sprintf("only token_bucket, leaky_bucket and fixed_window take a charge after the response into debt; %s has no debt a later window pays back exactly (change the algorithm or remove charge)", r.Algorithm), "charge")
		}
	default:
		return fieldErr(fmt.Sprintf("must be request or after_response, got %q", string(r.Charge)), "charge")
	}
	switch mw := r.MaxReserveWait; {
	case mw == 0:
	case r.Algorithm != algorithm.TokenBucket && r.Algorithm != algorithm.LeakyBucket:
		return fieldErr(fmt.Sprintf("only token_bucket and leaky_bucket rules reserve; remove max_reserve_wait or change the algorithm (got %s)", r.Algorithm), "max_reserve_wait")
	case mw < Duration(time.Millisecond) || time.Duration(mw)%time.Millisecond != 0:
		return fieldErr(fmt.Sprintf("must be a whole number of milliseconds, at least 1ms, got %s", mw), "max_reserve_wait")
	case mw > maxReserveWait:
		return fieldErr(fmt.Sprintf("must be ≤ 1h, the longest any reservation waits, got %s", mw), "max_reserve_wait")
	}
	// What keeps the algorithms exact: a bucket's full refill within
	// algorithm.MaxRefill (see algorithm.Params.Check).
	if field, msg := r.Params().Check(); field != "" && r.Limit != 0 {
		return fieldErr(msg, field)
	}
	if !r.FailureMode.Valid() {
		return fieldErr(fmt.Sprintf("must be open or closed, got %q", string(r.FailureMode)), "failure_mode")
	}
	if !r.Lease.Valid() {
		return fieldErr(fmt.Sprintf("must be auto, off or on, got %q", string(r.Lease)), "lease")
	}
	return nil
}

// validateNames checks name and replaces.
func (r *Rule) validateNames() error {
	if r.Name != "" {
		if err := validName(r.Name, "name"); err != nil {
			return err
		}
	}
	if len(r.Replaces) > maxReplaces {
		return fieldErr(fmt.Sprintf("at most %d names, got %d", maxReplaces, len(r.Replaces)), "replaces")
	}
	for i, n := range r.Replaces {
		at := fmt.Sprintf("replaces[%d]", i)
		if n == "" {
			return fieldErr("want the name of a rule, got an empty string", at)
		}
		if err := validName(n, at); err != nil {
			return err
		}
		if n == r.Name {
			return fieldErr(fmt.Sprintf("%s is the rule's own name: a rule does not replace itself; remove it", quote.Short(n)), at)
		}
	}
	return nil
}

// validName checks a non-empty rule name.
func validName(n, field string) error {
	switch {
	case len(n) > maxName:
		return fieldErr(fmt.Sprintf("must be at most %d bytes, got %d", maxName, len(n)), field)
	case !utf8.ValidString(n) || strings.ContainsFunc(n, unicode.IsControl):
		return fieldErr(fmt.Sprintf("must be UTF-8 without control characters, got %s", quote.Short(n)), field)
	}
	return nil
}

// Validate checks the plan name.
func (c *Client) Validate() error {
	if c.Plan == "" {
		return fieldErr("required", "plan")
	}
	if msg := planProblem(c.Plan); msg != "" {
		return fieldErr(msg, "plan")
	}
	return nil
}

// Validate checks every rule and client, that rule ids are unique, and
// that no call matches more than maxRulesPerCall enabled rules. The error
// is a *FieldError whose Field is the full path, e.g.
// `rules[2] (id "free-per-user").limit`, or "rules" for rules that overlap
// too much.
func (s *Set) Validate() error {
	if err := s.validateFields(); err != nil {
		return err
	}
	return build(s).checkOverlap()
}

// validateFields is Validate without the overlap check.
func (s *Set) validateFields() error {
	if s.Revision < 0 {
		return fieldErr(fmt.Sprintf("must be ≥ 0, got %d", s.Revision), "revision")
	}
	if s.DefaultPlan != "" {
		if msg := planProblem(s.DefaultPlan); msg != "" {
			return fieldErr(msg, "default_plan")
		}
	}
	seen := make(map[string]int, len(s.Rules))
	for i := range s.Rules {
		r := &s.Rules[i]
		if err := r.Validate(); err != nil {
			return ruleErr(i, r.ID, err.(*FieldError))
		}
		if j, dup := seen[r.ID]; dup {
			return ruleErr(i, r.ID, fieldErr(fmt.Sprintf("duplicate of rules[%d]", j), "id"))
		}
		seen[r.ID] = i
	}
	for _, id := range sortedKeys(s.Clients) {
		if err := validClientID(id); err != nil {
			fe := err.(*FieldError)
			return &FieldError{Field: clientField(id), Message: fe.Message, path: []string{"clients", id}}
		}
		c := s.Clients[id]
		if err := c.Validate(); err != nil {
			return clientErr(id, err.(*FieldError))
		}
	}
	return nil
}

// validClientID checks a client id as used in Set.Clients and the admin
// API: "user:<id>", "api_key:<key>" or "ip:<address or prefix>". The value
// after the colon is non-empty, at most 256 bytes of UTF-8 without control
// characters; a user or key value starting with "h:" is a digest, "h:" and
// 32 lowercase hex digits, the id sluice keys a user or key by when it is
// not kept as itself (see package identity); an ip value is an address or
// a masked prefix in canonical form
// ("2001:db8::/64", not "2001:DB8:0::1/64"), since clients are looked up by
// exact string. The error is a *FieldError for the field "client".
func validClientID(id string) error {
	kind, val, ok := strings.Cut(id, ":")
	if !ok || (kind != "user" && kind != "api_key" && kind != "ip") {
		return fieldErr(fmt.Sprintf(`want "user:<id>", "api_key:<key>" or "ip:<address or prefix>", got %s`, quote.Short(id)), "client")
	}
	switch {
	case val == "":
		return fieldErr(fmt.Sprintf("want a value after %q, got %s", kind+":", quote.Short(id)), "client")
	case len(val) > maxClientIDValue:
		return fieldErr(fmt.Sprintf("the value after %q is %d bytes, want at most %d", kind+":", len(val), maxClientIDValue), "client")
	case !utf8.ValidString(val):
		return fieldErr(fmt.Sprintf("%s is not valid UTF-8", quote.Short(id)), "client")
	case strings.ContainsFunc(val, unicode.IsControl):
		return fieldErr(fmt.Sprintf("%s contains a control character", quote.Short(id)), "client")
	}
	if kind != "ip" {
		if d, ok := strings.CutPrefix(val, clientkey.DigestPrefix); ok && !isDigest(d) {
			return fieldErr(fmt.Sprintf(`%s: a value starting with %q names a digest: want %q and %d lowercase hex digits, the first %d bytes of the SHA-256 of the %s (how sluice keys a value over %d bytes, with control characters, not UTF-8, or itself starting with %q)`,
				quote.Short(id), clientkey.DigestPrefix, clientkey.DigestPrefix, clientkey.DigestLen, clientkey.DigestLen/2, strings.ReplaceAll(kind, "_", " "), identity.MaxValue, clientkey.DigestPrefix), "client")
		}
		return nil
	}
	var canon string
	if strings.Contains(val, "/") {
		p, err := netip.ParsePrefix(val)
		if err != nil {
			return fieldErr(fmt.Sprintf("%s: want an IP address or prefix such as 203.0.113.7 or 2001:db8::/64", quote.Short(id)), "client")
		}
		canon = p.Masked().String()
	} else {
		a, err := netip.ParseAddr(val)
		if err != nil || a.Zone() != "" {
			return fieldErr(fmt.Sprintf("%s: want an IP address or prefix such as 203.0.113.7 or 2001:db8::/64", quote.Short(id)), "client")
		}
		canon = a.String()
	}
	if canon != val {
		return fieldErr(fmt.Sprintf("%s: write it in canonical form, %q", quote.Short(id), "ip:"+canon), "client")
	}
	return nil
}

// isDigest reports whether s is clientkey.DigestLen lowercase hex digits.
func isDigest(s string) bool {
	if len(s) != clientkey.DigestLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// FieldError is a validation or decoding error in one field. Field is the
// field's path as a user wrote it ("limit", "match.endpoint",
// `rules[2] (id "free-per-user").window`); Message says what is wrong, in
// words fit to show to the user of the admin API. Line is the 1-based line
// of the field in a YAML document, 0 when unknown.
type FieldError struct {
	Field   string
	Message string
	Line    int

	path []string // Field as components ("rules", "2", "window"), to find a line
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return "line " + strconv.Itoa(e.Line) + ": " + e.Field + ": " + e.Message
	}
	return e.Field + ": " + e.Message
}

func fieldErr(msg string, path ...string) *FieldError {
	return &FieldError{Field: strings.Join(path, "."), Message: msg, path: path}
}

// ruleErr puts a rule's field error under its place in a Set.
func ruleErr(i int, id string, fe *FieldError) *FieldError {
	return &FieldError{
		Field:   ruleField(i, id) + "." + fe.Field,
		Message: fe.Message,
		Line:    fe.Line,
		path:    append([]string{"rules", strconv.Itoa(i)}, fe.path...),
	}
}

func ruleField(i int, id string) string {
	if id == "" {
		return fmt.Sprintf("rules[%d]", i)
	}
	return fmt.Sprintf("rules[%d] (id %s)", i, quote.Short(id))
}

func clientErr(id string, fe *FieldError) *FieldError {
	return &FieldError{
		Field:   clientField(id) + "." + fe.Field,
		Message: fe.Message,
		Line:    fe.Line,
		path:    append([]string{"clients", id}, fe.path...),
	}
}

func clientField(id string) string { return "clients[" + quote.Short(id) + "]" }

func validID(id string) error {
	if id == "" {
		return fieldErr("required", "id")
	}
	if !ruleid.Valid(id) {
		return fieldErr(fmt.Sprintf("must be 1 to 64 of a-z 0-9 . _ - starting with a letter or digit, got %s", quote.Short(id)), "id")
	}
	return nil
}

// planProblem returns what is wrong with a non-empty plan name, or "".
func planProblem(p string) string {
	if !plan.Valid(p) {
		return fmt.Sprintf("must be 1 to 64 of A-Z a-z 0-9 . _ - starting with a letter or digit, got %s", quote.Short(p))
	}
	return ""
}

// maxDomain is the longest match.domain, in bytes.
const maxDomain = 1024

// domainProblem checks an Envoy domain: any UTF-8 text, as Envoy and
// envoyproxy/ratelimit take it (Envoy Gateway's look like
// "default/eg/https"), of at most maxDomain bytes.
func domainProblem(d string) string {
	switch {
	case len(d) > maxDomain:
		return fmt.Sprintf("must be at most %d bytes, got %d", maxDomain, len(d))
	case !utf8.ValidString(d):
		return "must be valid UTF-8"
	}
	return ""
}

// validText checks free text: valid UTF-8, at most max bytes, no control
// characters other than newline and tab.
func validText(field, s string, max int) error {
	switch {
	case len(s) > max:
		return fieldErr(fmt.Sprintf("must be at most %d bytes, got %d", max, len(s)), field)
	case !utf8.ValidString(s):
		return fieldErr("must be valid UTF-8", field)
	case strings.ContainsFunc(s, func(c rune) bool {
		return c != '\n' && c != '\t' && (unicode.IsControl(c) || c == '\u2028' || c == '\u2029' || c == '\ufeff')
	}):
		return fieldErr("must not contain control characters other than newline and tab", field)
	}
	return nil
}

func isLowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
func isAlnum(c byte) bool      { return isLowerAlnum(c) || 'A' <= c && c <= 'Z' }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
