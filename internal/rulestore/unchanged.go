package rulestore

import (
	"bytes"

	"github.com/sluicehq/sluice/rules"
)

// unchanged reports whether next, the set an Update's fn made from a clone
// of cur, stores exactly what cur does: their canonical encodings
// (rules.EncodeYAML: rules in order, clients sorted, empty fields left out)
// are equal, the revision aside. Such an Update stores nothing: no new
// revision, no write, no history, no subscriber call. A set that fails to
// encode counts as changed, so that the write reports the error.
func unchanged(cur, next *rules.Set) bool {
	if cur == nil {
		cur = &rules.Set{}
	}
	c, n := *cur, *next // shallow copies, to set the revision
	n.Revision = c.Revision
	a, err := rules.EncodeYAML(&c)
	if err != nil {
		return false
	}
	b, err := rules.EncodeYAML(&n)
	return err == nil && bytes.Equal(a, b)
}
