package cli

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/sluicehq/sluice/internal/adminclient"
)

// formatChange renders one change of an apply for a person:
//
//   - rule free-per-user
//     ~ rule x: limit 100 → 200, window 1m → 1h
//   - rule y
//   - client user:alice (plan pro)
//     ~ client user:bob: plan free → pro
//     ~ default_plan: free → basic
func formatChange(c adminclient.Change) string {
	sign := map[string]string{"create": "+", "update": "~", "delete": "-"}[c.Op]
	if sign == "" {
		sign = "?"
	}
	if c.Kind == "default_plan" {
		before, after := planValue(c.Before), planValue(c.After)
		switch c.Op {
		case "update":
			return sign + " default_plan: " + before + " → " + after
		case "delete":
			return sign + " default_plan " + before
		}
		return sign + " default_plan " + after
	}
	head := sign + " " + c.Kind + " " + c.ID
	switch c.Op {
	case "create":
		if c.Kind == "client" {
			if p := fieldsOf(c.After)["plan"]; p != nil {
				return head + " (plan " + formatValue(p) + ")"
			}
		}
		return head
	case "update":
		diffs := fieldDiffs(c.Kind, c.Before, c.After)
		if len(diffs) == 0 {
			return head
		}
		return head + ": " + strings.Join(diffs, ", ")
	}
	return head
}

// planValue renders a default plan, a JSON string.
func planValue(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return string(raw)
	}
	if s == "" {
		return "(none)"
	}
	return formatValue(s)
}

// ruleOrder is the order rule fields are listed in, as in the rules file;
// other fields follow in name order.
var ruleOrder = []string{"id", "description", "match.plan", "match.endpoint", "by", "limit", "window", "burst",
	"algorithm", "failure_mode", "lease", "shadow", "enabled", "unlimited", "name", "replaces"}

// ruleDefaults are the values a rule field takes when it is left out, so
// that an update shows what changed in meaning ("by client → ip", not
// "by (none) → ip").
var ruleDefaults = map[string]any{
	"description":    "",
	"match.plan":     "*",
	"match.endpoint": "*",
	"by":             "client",
	"burst":          "default",
	"algorithm":      "token_bucket",
	"failure_mode":   "open",
	"lease":          "auto",
	"shadow":         false,
	"enabled":        true,
	"unlimited":      false,
}

// fieldDiffs lists the fields that differ between two JSON objects as
// "name before → after", in the rules file's order.
func fieldDiffs(kind string, before, after json.RawMessage) []string {
	b, a := fieldsOf(before), fieldsOf(after)
	if kind == "rule" {
		for k, v := range ruleDefaults {
			if _, ok := b[k]; !ok {
				b[k] = v
			}
			if _, ok := a[k]; !ok {
				a[k] = v
			}
		}
	}
	var names []string
	for k := range b {
		names = append(names, k)
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			names = append(names, k)
		}
	}
	rank := func(k string) int {
		if i := slices.Index(ruleOrder, k); i >= 0 {
			return i
		}
		return len(ruleOrder)
	}
	slices.SortFunc(names, func(x, y string) int {
		if d := rank(x) - rank(y); d != 0 {
			return d
		}
		return strings.Compare(x, y)
	})
	var out []string
	for _, k := range names {
		bv, inB := b[k]
		av, inA := a[k]
		if inB && inA && formatValue(bv) == formatValue(av) {
			continue
		}
		bs, as := "(none)", "(none)"
		if inB {
			bs = formatValue(bv)
		}
		if inA {
			as = formatValue(av)
		}
		out = append(out, k+" "+bs+" → "+as)
	}
	return out
}

// fieldsOf flattens a JSON object into dotted field names ("match.plan");
// anything else is an empty map.
func fieldsOf(raw json.RawMessage) map[string]any {
	out := map[string]any{}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if len(raw) == 0 || d.Decode(&m) != nil {
		return out
	}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			if v == nil {
				continue // null: as if left out
			}
			out[prefix+k] = v
		}
	}
	walk("", m)
	return out
}

// formatValue renders a decoded JSON value: strings bare unless they are
// empty, hold spaces or punctuation of the diff, or are long.
func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		if r := []rune(v); len(r) > 60 {
			return strconv.Quote(string(r[:57]) + "...")
		}
		if v == "" || strings.ContainsAny(v, ",→\"") || strings.ContainsFunc(v, unicode.IsSpace) {
			return strconv.Quote(v)
		}
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
