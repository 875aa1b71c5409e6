package rules

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/internal/rulekey"
)

// Entry is one entry of an Envoy rate limit descriptor: a key and a value.
// In a rule's match.entries, Value "" matches any value (and, with the rule
// keyed by entry:<key>, makes one bucket per value), a Value ending in "*"
// (and with no other "*") matches every value starting with what comes
// before it, a Value with a "*" elsewhere is a pattern in which each "*"
// matches any run of bytes, empty included ("/api/*/action"), and any
// other Value matches itself only.
type Entry struct {
	Key   string `json:"key" yaml:"key"`
	Value string `json:"value,omitempty" yaml:"value,omitempty"`
}

// Limits on match.entries.
const (
	maxEntries    = 32  // entries in one match, as in one descriptor
	maxEntryValue = 256 // bytes of a value in a rule's match
)

// validEntries checks a rule's match.entries.
func validEntries(es []Entry) *FieldError {
	if len(es) > maxEntries {
		return fieldErr(fmt.Sprintf("at most %d entries, got %d", maxEntries, len(es)), "match", "entries")
	}
	for i, e := range es {
		at := fmt.Sprintf("entries[%d]", i)
		switch {
		case e.Key == "":
			return fieldErr("required", "match", at, "key")
		case len(e.Key) > rulekey.MaxName:
			return fieldErr(fmt.Sprintf("must be at most %d bytes, got %d", rulekey.MaxName, len(e.Key)), "match", at, "key")
		case strings.IndexFunc(e.Key, func(c rune) bool { return c <= ' ' || c >= 0x7f }) >= 0:
			return fieldErr(fmt.Sprintf("must be printable ASCII without spaces, got %s", quote.Short(e.Key)), "match", at, "key")
		case len(e.Value) > maxEntryValue:
			return fieldErr(fmt.Sprintf("must be at most %d bytes, got %d", maxEntryValue, len(e.Value)), "match", at, "value")
		case !utf8.ValidString(e.Value) || strings.ContainsFunc(e.Value, unicode.IsControl):
			return fieldErr("must be UTF-8 without control characters", "match", at, "value")
		}
	}
	return nil
}

// entryNode is a level of the descriptor tree of an Index's view: the rules
// whose match.entries end here, and the entries that lead deeper.
type entryNode struct {
	rules []*Compiled
	keys  map[string]*entryKey
}

// entryKey holds the nodes one entry key leads to, by how its value is
// matched.
type entryKey struct {
	values   map[string]*entryNode // exact values
	prefixes []entryPrefix         // values ending in "*" (and no other "*"), longest first
	patterns []entryPattern        // values with a "*" before the end, in set order
	any      *entryNode            // no value
}

type entryPrefix struct {
	prefix string
	node   *entryNode
}

// entryPattern is a value with a "*" before its end, split at each "*".
type entryPattern struct {
	value string
	parts []string
	node  *entryNode
}

// isPattern reports whether v has a "*" before its last byte.
func isPattern(v string) bool { return strings.Contains(strings.TrimSuffix(v, "*"), "*") }

// fits reports whether value fits a pattern split at its "*"s (at least
// two parts), each "*" matching any run of bytes. It does not allocate.
func fits(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// addEntries puts c, an enabled rule with match.entries, in the tree.
func (ix *Index) addEntries(c *Compiled) {
	if ix.entries == nil {
		ix.entries = &entryNode{}
	}
	n := ix.entries
	for _, e := range c.Match.Entries {
		n = child(&n.keys, e.Key).node(e.Value)
	}
	n.rules = append(n.rules, c)
}

func (k *entryKey) node(v string) *entryNode {
	switch {
	case v == "":
		if k.any == nil {
			k.any = &entryNode{}
		}
		return k.any
	case isPattern(v):
		for _, x := range k.patterns {
			if x.value == v {
				return x.node
			}
		}
		n := &entryNode{}
		k.patterns = append(k.patterns, entryPattern{v, strings.Split(v, "*"), n})
		return n
	case strings.HasSuffix(v, "*"):
		p := v[:len(v)-1]
		for _, x := range k.prefixes {
			if x.prefix == p {
				return x.node
			}
		}
		n := &entryNode{}
		k.prefixes = append(k.prefixes, entryPrefix{p, n})
		slices.SortStableFunc(k.prefixes, func(a, b entryPrefix) int { return len(b.prefix) - len(a.prefix) })
		return n
	}
	return child(&k.values, v)
}

// MatchEntries appends to dst the enabled rules whose match.entries select
// a descriptor with these entries, and returns dst. The descriptor is
// walked entry by entry as envoyproxy/ratelimit walks its configuration:
// at each level an entry is matched by its exact value if some rule names
// it, else by the longest value prefix ("abc*") that fits, else by the
// first pattern ("/api/*/action", in set order) that fits, else by a rule
// naming the key without a value — the most specific match, never
// retried with a less specific one when a deeper entry then fails. Only
// rules whose entries end where the descriptor ends apply. Rules with no
// match.entries are never returned (see Match). MatchEntries allocates
// nothing when dst has the capacity.
func (ix *Index) MatchEntries(entries []Entry, dst []*Compiled) []*Compiled {
	if ix == nil || ix.entries == nil || len(entries) == 0 {
		return dst
	}
	n := ix.entries
	for _, e := range entries {
		k := n.keys[e.Key]
		if k == nil {
			return dst
		}
		next := k.values[e.Value]
		if next == nil {
			for _, p := range k.prefixes {
				if strings.HasPrefix(e.Value, p.prefix) {
					next = p.node
					break
				}
			}
		}
		if next == nil {
			for i := range k.patterns {
				if fits(k.patterns[i].parts, e.Value) {
					next = k.patterns[i].node
					break
				}
			}
		}
		if next == nil {
			next = k.any
		}
		if next == nil {
			return dst
		}
		n = next
	}
	return append(dst, n.rules...)
}

// HasEntries reports whether some enabled rule of this view matches on
// descriptor entries.
func (ix *Index) HasEntries() bool { return ix != nil && ix.entries != nil }
