package rules

import (
	"bytes"
	"errors"
	"slices"

	"go.yaml.in/yaml/v3"
)

// encodeYAMLOnto renders s as a rules file made from prev, the rules file
// it replaces, so that what an operator wrote stays where it was: the
// order of the top-level keys, every comment, the text of each rule and
// client that did not change (a changed one keeps its place and its
// comments), rules in the order of s (a new one at the end), new clients
// after the others. What it returns reads back (ParseYAML) to a Set equal
// to s; when prev is not a rules document whose layout can be kept (not
// YAML, not a mapping) it is an error and the caller writes EncodeYAML's.
func encodeYAMLOnto(prev []byte, s *Set) ([]byte, error) {
	if s == nil {
		s = &Set{}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(prev, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errNoLayout
	}
	old, err := ParseYAML(prev)
	if err != nil {
		return nil, err
	}
	root := doc.Content[0]
	setKey(root, "revision", s.Revision != 0, intNode(s.Revision), 0)
	at := 0
	if keyAt(root, "revision") >= 0 {
		at = keyAt(root, "revision") + 2
	}
	setKey(root, "default_plan", s.DefaultPlan != "", str(s.DefaultPlan), at)
	keepRules(root, old, s)
	keepClients(root, s)

	var buf bytes.Buffer
	e := yaml.NewEncoder(&buf)
	e.SetIndent(2)
	if err := e.Encode(&doc); err != nil {
		return nil, err
	}
	if err := e.Close(); err != nil {
		return nil, err
	}
	// What is written must read back as s, whatever the layout kept.
	back, err := ParseYAML(buf.Bytes())
	if err != nil {
		return nil, err
	}
	back.Revision = s.Revision
	want, err1 := EncodeYAML(s)
	got, err2 := EncodeYAML(back)
	if err1 != nil || err2 != nil || !bytes.Equal(want, got) {
		return nil, errNoLayout
	}
	return buf.Bytes(), nil
}

var errNoLayout = errors.New("rules: the previous file's layout cannot be kept")

// keyAt returns the index in m.Content of the key named key, -1 if none.
func keyAt(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i
		}
	}
	return -1
}

// setKey makes member key of mapping m have value v when present, or
// removes it when not: a value that changes takes the old one's comments;
// a member added goes at index at; a member removed hands its head comment
// (a file's header, say) to the member after it.
func setKey(m *yaml.Node, key string, present bool, v *yaml.Node, at int) {
	i := keyAt(m, key)
	switch {
	case i >= 0 && present:
		old := m.Content[i+1]
		if old.Kind == yaml.ScalarNode && old.Value == v.Value {
			return
		}
		v.HeadComment, v.LineComment, v.FootComment = old.HeadComment, old.LineComment, old.FootComment
		m.Content[i+1] = v
	case i >= 0:
		removePair(m, i)
	case present:
		k := str(key)
		if at < len(m.Content) && m.Content[at].HeadComment != "" && at == 0 {
			// The first key carries the file's header: keep it first.
			k.HeadComment, m.Content[at].HeadComment = m.Content[at].HeadComment, ""
		}
		m.Content = slices.Insert(m.Content, at, k, v)
	}
}

// removePair removes the member whose key is at index i of mapping m,
// handing its key's head comment to the next member.
func removePair(m *yaml.Node, i int) {
	if hc := m.Content[i].HeadComment; hc != "" && i+2 < len(m.Content) {
		next := m.Content[i+2]
		if next.HeadComment != "" {
			hc += "\n" + next.HeadComment
		}
		next.HeadComment = hc
	}
	m.Content = slices.Delete(m.Content, i, i+2)
}

// keepRules makes the rules sequence of root hold s's rules, reusing the
// node of every rule of old (the file's) that did not change.
func keepRules(root *yaml.Node, old, s *Set) {
	i := keyAt(root, "rules")
	if i < 0 {
		root.Content = append(root.Content, str("rules"), &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"})
		i = len(root.Content) - 2
	}
	seq := root.Content[i+1]
	if seq.Kind != yaml.SequenceNode {
		seq = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", HeadComment: seq.HeadComment, LineComment: seq.LineComment}
		root.Content[i+1] = seq
	}
	nodes := make(map[string]*yaml.Node, len(seq.Content))
	for _, item := range seq.Content {
		if item.Kind == yaml.MappingNode {
			if j := keyAt(item, "id"); j >= 0 {
				nodes[item.Content[j+1].Value] = item
			}
		}
	}
	before := make(map[string]*Rule, len(old.Rules))
	for k := range old.Rules {
		before[old.Rules[k].ID] = &old.Rules[k]
	}
	wasEmpty := len(seq.Content) == 0
	items := make([]*yaml.Node, 0, len(s.Rules))
	for k := range s.Rules {
		r := &s.Rules[k]
		n, o := nodes[r.ID], before[r.ID]
		switch {
		case n != nil && o != nil && sameRuleText(o, r):
			items = append(items, n)
		case n != nil && o != nil:
			patchRule(n, o, r)
			items = append(items, n)
		default:
			items = append(items, ruleNode(r))
		}
	}
	seq.Content = items
	switch {
	case len(items) == 0:
		seq.Style = yaml.FlowStyle
	case wasEmpty:
		seq.Style = 0
	}
}

// patchRule changes n, the file's mapping of rule o, into one of r, field
// by field: a field whose meaning did not change stays as written (or
// absent), a changed one takes the new value in its place with its
// comments, a new one goes last, one r lacks goes.
func patchRule(n *yaml.Node, o, r *Rule) {
	was, now := ruleNode(o), ruleNode(r)
	for i := 0; i+1 < len(was.Content); i += 2 {
		k := was.Content[i].Value
		if keyAt(now, k) < 0 {
			if j := keyAt(n, k); j >= 0 {
				removePair(n, j)
			}
		}
	}
	for i := 0; i+1 < len(now.Content); i += 2 {
		k, v := now.Content[i].Value, now.Content[i+1]
		if j := keyAt(was, k); j >= 0 && sameText(was.Content[j+1], v) {
			continue
		}
		if j := keyAt(n, k); j >= 0 {
			old := n.Content[j+1]
			v.HeadComment, v.LineComment, v.FootComment = old.HeadComment, old.LineComment, old.FootComment
			n.Content[j+1] = v
		} else {
			n.Content = append(n.Content, str(k), v)
		}
	}
}

// sameText reports whether two nodes render alike.
func sameText(a, b *yaml.Node) bool {
	x, err1 := yaml.Marshal(a)
	y, err2 := yaml.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// sameRuleText reports whether a and b render alike (EncodeYAML's text).
func sameRuleText(a, b *Rule) bool {
	x, err1 := yaml.Marshal(ruleNode(a))
	y, err2 := yaml.Marshal(ruleNode(b))
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// keepClients makes the clients mapping of root hold s's clients: each
// kept where it was (its plan changed in place), new ones after them in
// id order, none left: no clients key.
func keepClients(root *yaml.Node, s *Set) {
	i := keyAt(root, "clients")
	if len(s.Clients) == 0 {
		if i >= 0 {
			removePair(root, i)
		}
		return
	}
	if i < 0 {
		root.Content = append(root.Content, str("clients"), mapping(false))
		i = len(root.Content) - 2
	}
	cm := root.Content[i+1]
	if cm.Kind != yaml.MappingNode {
		cm = mapping(false)
		root.Content[i+1] = cm
	}
	seen := make(map[string]bool, len(s.Clients))
	content := make([]*yaml.Node, 0, 2*len(s.Clients))
	for j := 0; j+1 < len(cm.Content); j += 2 {
		k, v := cm.Content[j], cm.Content[j+1]
		c, ok := s.Clients[k.Value]
		if !ok || seen[k.Value] {
			continue
		}
		seen[k.Value] = true
		if p := keyAt(v, "plan"); v.Kind == yaml.MappingNode && len(v.Content) == 2 && p == 0 {
			if v.Content[1].Value != c.Plan {
				v.Content[1] = str(c.Plan)
			}
		} else {
			nv := mapping(true)
			add(nv, "plan", str(c.Plan))
			nv.HeadComment, nv.LineComment, nv.FootComment = v.HeadComment, v.LineComment, v.FootComment
			v = nv
		}
		content = append(content, k, v)
	}
	for _, id := range sortedKeys(s.Clients) {
		if !seen[id] {
			c := mapping(true)
			add(c, "plan", str(s.Clients[id].Plan))
			content = append(content, str(id), c)
		}
	}
	cm.Content = content
	if cm.Style&yaml.FlowStyle != 0 && len(content) > 2 {
		cm.Style = 0
	}
}
