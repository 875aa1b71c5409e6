// Package plan says what a plan name is. Rules name plans in match.plan
// and clients[].plan, the decision API takes one in "plan", and JWT plan
// claims carry one: all of them check it here, so that they agree.
package plan

// MaxLen is the longest plan name, in bytes.
const MaxLen = 64

// Valid reports whether p is a plan name: 1 to MaxLen of A-Z a-z 0-9
// . _ - starting with a letter or digit.
func Valid(p string) bool {
	if p == "" || len(p) > MaxLen || !isAlnum(p[0]) {
		return false
	}
	for i := 1; i < len(p); i++ {
		if c := p[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
