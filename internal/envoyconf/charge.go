package envoyconf

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/rules"
)

// A Selector names descriptors of an envoyproxy/ratelimit configuration
// from outside it: every descriptor of Domain; with Key, those whose chain
// (the descriptor or one above it) has an entry of that key; with Value
// too, of that key and that value as the configuration writes it
// ("prefix*" is the wildcard entry itself, not the values it fits).
type Selector struct {
	Domain, Key, Value string
	HasValue           bool
}

// ParseSelector reads domain, domain:key or domain:key=value. The domain
// is what comes before the last ':' (of the text before the first '='),
// so a domain may hold ':' only when a key follows.
func ParseSelector(s string) (Selector, error) {
	left, value, hasValue := strings.Cut(s, "=")
	var sel Selector
	if i := strings.LastIndexByte(left, ':'); i >= 0 {
		sel = Selector{Domain: left[:i], Key: left[i+1:], Value: value, HasValue: hasValue}
		if sel.Key == "" {
			return sel, fmt.Errorf("%s: want domain, domain:key or domain:key=value, with a key after the ':'", quote.Short(s))
		}
	} else {
		if hasValue {
			return sel, fmt.Errorf("%s: want domain, domain:key or domain:key=value; a value needs a key (domain:key=value)", quote.Short(s))
		}
		sel.Domain = left
	}
	if sel.Domain == "" {
		return sel, fmt.Errorf("%s: want domain, domain:key or domain:key=value, with a non-empty domain", quote.Short(s))
	}
	return sel, nil
}

// ParseSelectors is ParseSelector of each of ss.
func ParseSelectors(ss []string) ([]Selector, error) {
	var sels []Selector
	for _, s := range ss {
		sel, err := ParseSelector(s)
		if err != nil {
			return nil, err
		}
		sels = append(sels, sel)
	}
	return sels, nil
}

func (sel Selector) String() string {
	s := sel.Domain
	if sel.Key != "" {
		s += ":" + sel.Key
	}
	if sel.HasValue {
		s += "=" + sel.Value
	}
	return s
}

// selects reports whether sel names the descriptor chain of domain.
func (sel Selector) selects(domain string, chain []rules.Entry) bool {
	if sel.Domain != domain {
		return false
	}
	if sel.Key == "" {
		return true
	}
	for _, e := range chain {
		if e.Key == sel.Key && (!sel.HasValue || e.Value == sel.Value) {
			return true
		}
	}
	return false
}
