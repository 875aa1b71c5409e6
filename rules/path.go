package rules

import "strings"

// methodFits reports whether a call with method fits a rule on ruleMethod,
// an endpoint's method or method set ("GET|HEAD"): "*" fits every method,
// methods compare without regard to ASCII case (some servers route "get"
// as GET), and a rule on GET also applies to HEAD, which servers answer
// with the GET handler (RFC 9110 §9.3.2).
func methodFits(ruleMethod, method string) bool {
	if ruleMethod == "*" {
		return true
	}
	if strings.IndexByte(ruleMethod, '|') < 0 {
		return ruleMethod == method || oneMethodFits(ruleMethod, method)
	}
	for set := ruleMethod; set != ""; {
		var m string
		m, set, _ = strings.Cut(set, "|")
		if oneMethodFits(m, method) {
			return true
		}
	}
	return false
}

func oneMethodFits(ruleMethod, method string) bool {
	return equalFoldASCII(ruleMethod, method) || ruleMethod == "GET" && equalFoldASCII(method, "HEAD")
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// Methods as bits, so that the index tests a rule's method set against a
// call's method with one AND: the call's method is classified once (without
// regard to ASCII case), each rule's set when it is compiled.
var knownMethods = [...]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}

const (
	methodGet   = 1 << 0
	methodHead  = 1 << 1
	methodOther = 1 << 15 // a method not in knownMethods, or none
	methodAll   = 1<<16 - 1
)

// methodBit returns the bit of a call's method: that of a known method in
// any ASCII case, else methodOther.
func methodBit(m string) uint16 {
	if len(m) < len("GET") { // none, as an Envoy call has
		return methodOther
	}
	switch m { // the usual spellings, without a loop
	case "GET":
		return methodGet
	case "POST":
		return 1 << 2
	case "HEAD":
		return methodHead
	case "PUT":
		return 1 << 3
	}
	for i, k := range knownMethods {
		if len(k) == len(m) && (k == m || equalFoldASCII(k, m)) {
			return 1 << i
		}
	}
	return methodOther
}

// methodMask returns the bits of the calls a rule on ruleMethod (a method,
// a set, or "*") fits, and whether it also names a method outside
// knownMethods, which only methodFits can test.
func methodMask(ruleMethod string) (mask uint16, other bool) {
	if ruleMethod == "*" {
		return methodAll, false
	}
	for _, m := range strings.Split(ruleMethod, "|") {
		b := methodBit(m)
		switch b {
		case methodOther:
			other = true
		case methodGet:
			mask |= methodGet | methodHead
		default:
			mask |= b
		}
	}
	return mask, other
}
