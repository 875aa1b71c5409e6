package rules

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/internal/urlpath"
)

// maxEndpoint is the longest endpoint pattern, in bytes.
const maxEndpoint = 512

// endpointPattern is a parsed endpoint pattern, "METHOD /path". Method is an
// uppercase HTTP method, a set of them joined by "|" ("GET|HEAD",
// "PUT|PATCH|DELETE"), or "*" for any. For an exact pattern Path is the
// path to match; for a prefix pattern ("/api/*", Prefix true) Path is the
// part before "/*" ("/api"), and the pattern matches that path itself and
// everything under it; "/*" has Path "" and matches every path.
//
// The zero value is not a pattern; parseEndpoint makes one. An
// endpointPattern is a small value, safe to copy and to use concurrently.
type endpointPattern struct {
	Method string
	Path   string
	Prefix bool
}

const endpointForm = `want "METHOD /path", e.g. "GET /api/orders"`

// parseEndpoint parses "METHOD /path": an uppercase HTTP method (A-Z, at
// most 16 letters), several joined by "|" (at most maxMethods, each once),
// or "*", exactly one space, then a path starting with "/".
// A path ending in "/*" is a prefix pattern; no other "*" may appear in the
// path. No whitespace or control characters, at most 512 bytes of UTF-8.
// The error is a *FieldError for the field "endpoint".
func parseEndpoint(s string) (endpointPattern, error) {
	bad := func(format string, args ...any) (endpointPattern, error) {
		return endpointPattern{}, fieldErr(fmt.Sprintf(format, args...), "endpoint")
	}
	if len(s) > maxEndpoint {
		return bad("must be at most %d bytes, got %d", maxEndpoint, len(s))
	}
	if !utf8.ValidString(s) {
		return bad("must be valid UTF-8")
	}
	method, path, ok := strings.Cut(s, " ")
	if !ok {
		return bad("%s", endpointForm)
	}
	if msg := methodProblem(method); msg != "" {
		return bad("%s; %s", endpointForm, msg)
	}
	if strings.HasPrefix(path, " ") {
		return bad("must have exactly one space, between the method and the path, got %s", quote.Short(s))
	}
	if !strings.HasPrefix(path, "/") {
		return bad(`%s; the path must start with "/", got %s`, endpointForm, quote.Short(path))
	}
	if strings.ContainsFunc(path, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) {
		return bad("the path must not contain whitespace or control characters, got %s", quote.Short(path))
	}
	e := endpointPattern{Method: method, Path: path}
	if strings.HasSuffix(path, "/*") {
		e.Path, e.Prefix = path[:len(path)-2], true
	}
	if strings.Contains(e.Path, "*") {
		return bad(`"*" is only allowed as a final "/*" (everything under a path), got %s`, quote.Short(path))
	}
	return e, nil
}

// maxMethods is the most methods an endpoint's method set names.
const maxMethods = 16

// methodProblem returns what is wrong with the method of an endpoint
// pattern, or "".
func methodProblem(m string) string {
	const want = `the method must be "*", an uppercase HTTP method such as GET (at most 16 letters), or several joined by "|" such as GET|HEAD`
	if m == "*" {
		return ""
	}
	if strings.Count(m, "|") >= maxMethods {
		return fmt.Sprintf("at most %d methods joined by \"|\", got %d", maxMethods, strings.Count(m, "|")+1)
	}
	parts := strings.Split(m, "|")
	for i, one := range parts {
		switch {
		case one == "*":
			return fmt.Sprintf(`"*" is every method and joins no other: write "*" alone or list the methods, got %s`, quote.Short(m))
		case !validMethod(one):
			return fmt.Sprintf("%s, got %s", want, quote.Short(m))
		case slices.Contains(parts[:i], one):
			return fmt.Sprintf("%s names %s twice", quote.Short(m), one)
		}
	}
	return ""
}

func validMethod(m string) bool {
	if m == "" || len(m) > 16 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] < 'A' || m[i] > 'Z' {
			return false
		}
	}
	return true
}

// Matches reports whether a call with this method and path (the request
// path as given) fits the pattern, as Index.Match decides: both paths are
// compared in their clean form (see Paths in the package doc), methods without regard to
// ASCII case, and a pattern on GET (alone or in a set) also fits HEAD.
func (e endpointPattern) Matches(method, path string) bool {
	if !methodFits(e.Method, method) {
		return false
	}
	return e.matchesPath(urlpath.Clean(path))
}

func (e endpointPattern) matchesPath(path string) bool {
	base := urlpath.Clean(e.Path)
	if !e.Prefix {
		return path == base
	}
	if base == "/" {
		base = ""
	}
	return base == "" || strings.HasPrefix(path, base) && (len(path) == len(base) || path[len(base)] == '/')
}

// String returns the pattern in the form parseEndpoint reads.
func (e endpointPattern) String() string {
	if e.Prefix {
		return e.Method + " " + e.Path + "/*"
	}
	return e.Method + " " + e.Path
}
