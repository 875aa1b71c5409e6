package rules

import (
	"bytes"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// EncodeYAML renders s as a rules file that ParseYAML reads back to an
// equal Set: fields in the order of the model, empty optional fields left
// out, rules in set order, each match and client as a one-line {…}, clients
// sorted by id. A nil s encodes as an empty Set.
func EncodeYAML(s *Set) ([]byte, error) {
	if s == nil {
		s = &Set{}
	}
	root := mapping(false)
	if s.Revision != 0 {
		add(root, "revision", intNode(s.Revision))
	}
	if s.DefaultPlan != "" {
		add(root, "default_plan", str(s.DefaultPlan))
	}
	rules := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if len(s.Rules) == 0 {
		rules.Style = yaml.FlowStyle
	}
	for i := range s.Rules {
		rules.Content = append(rules.Content, ruleNode(&s.Rules[i]))
	}
	add(root, "rules", rules)
	if len(s.Clients) > 0 {
		clients := mapping(false)
		for _, id := range sortedKeys(s.Clients) {
			c := mapping(true)
			add(c, "plan", str(s.Clients[id].Plan))
			add(clients, id, c)
		}
		add(root, "clients", clients)
	}
	var buf bytes.Buffer
	e := yaml.NewEncoder(&buf)
	e.SetIndent(2)
	if err := e.Encode(root); err != nil {
		return nil, err
	}
	if err := e.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func ruleNode(r *Rule) *yaml.Node {
	n := mapping(false)
	add(n, "id", str(r.ID))
	if r.Description != "" {
		add(n, "description", str(r.Description))
	}
	if r.Match.Domain != "" || r.Match.Plan != "" || r.Match.Endpoint != "" || r.Match.PathCase != "" || len(r.Match.Headers) > 0 || len(r.Match.Entries) > 0 {
		m := mapping(true)
		if r.Match.Domain != "" {
			add(m, "domain", str(r.Match.Domain))
		}
		if r.Match.Plan != "" {
			add(m, "plan", str(r.Match.Plan))
		}
		if r.Match.Endpoint != "" {
			add(m, "endpoint", str(r.Match.Endpoint))
		}
		if r.Match.PathCase != "" {
			add(m, "path_case", str(string(r.Match.PathCase)))
		}
		if len(r.Match.Headers) > 0 {
			h := mapping(true)
			for _, name := range sortedKeys(r.Match.Headers) {
				add(h, name, str(r.Match.Headers[name]))
			}
			add(m, "headers", h)
		}
		if len(r.Match.Entries) > 0 {
			m.Style = 0
			es := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for _, e := range r.Match.Entries {
				en := mapping(true)
				add(en, "key", str(e.Key))
				if e.Value != "" {
					add(en, "value", str(e.Value))
				}
				es.Content = append(es.Content, en)
			}
			add(m, "entries", es)
		}
		add(n, "match", m)
	}
	if r.By != "" {
		add(n, "by", str(string(r.By)))
	}
	if !r.Unlimited { // an unlimited rule has none
		add(n, "limit", intNode(r.Limit))
		add(n, "window", str(r.Window.String()))
		if r.Burst != 0 {
			add(n, "burst", intNode(r.Burst))
		}
		add(n, "algorithm", str(r.Algorithm.String()))
		if r.MaxReserveWait != 0 {
			add(n, "max_reserve_wait", str(r.MaxReserveWait.String()))
		}
	}
	if r.FailureMode != "" {
		add(n, "failure_mode", str(string(r.FailureMode)))
	}
	if r.Charge != "" {
		add(n, "charge", str(string(r.Charge)))
	}
	if r.Lease != "" {
		add(n, "lease", str(string(r.Lease)))
	}
	if r.Shadow {
		add(n, "shadow", boolNode(true))
	}
	if r.Quota {
		add(n, "quota", boolNode(true))
	}
	if r.Enabled != nil {
		add(n, "enabled", boolNode(*r.Enabled))
	}
	if r.Unlimited {
		add(n, "unlimited", boolNode(true))
	}
	if r.Name != "" {
		add(n, "name", str(r.Name))
	}
	if len(r.Replaces) > 0 {
		rs := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for _, name := range r.Replaces {
			rs.Content = append(rs.Content, str(name))
		}
		add(n, "replaces", rs)
	}
	return n
}

func mapping(flow bool) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return n
}

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, str(key), v)
}

// str is a string scalar; the encoder quotes it when it would otherwise
// read back as something else ("true", "10", "* /api/*").
func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func intNode(v int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v, 10)}
}

func boolNode(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}
