// Package ruleid says what a rule id may be: package rules validates ids
// with it, and internal/envoyconf uses it to decide whether a rate_limit's
// name can be its rule's id.
package ruleid

// MaxLen is the longest id, in bytes.
const MaxLen = 64

// Valid reports whether id is 1 to MaxLen of a-z 0-9 . _ - starting with a
// letter or digit.
func Valid(id string) bool {
	if id == "" || len(id) > MaxLen || !lowerAlnum(id[0]) {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !lowerAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func lowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
