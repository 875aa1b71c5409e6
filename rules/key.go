package rules

import "github.com/sluicehq/sluice/internal/rulekey"

// A rule's `by` names what its buckets are keyed by: one part, or several
// joined by "+" for one bucket per combination of their values.
//
//	client | user | api_key | ip   the caller (as identity keys it)
//	global                         one bucket for every call the rule matches
//	endpoint                       one bucket per method and clean path called
//	header:<name>                  one per value of a request header (gateway, middleware)
//	entry:<key>                    one per value of an Envoy descriptor entry
//	api_key+endpoint               one per API key and endpoint
//
// A call that lacks a value its rule is keyed by (no API key, no such
// header or entry) is not counted by that rule.
const (
	ByGlobal   By = "global"
	ByEndpoint By = "endpoint"
)

// parseBy reads a rule's `by` (see ByGlobal) into its key parts. "" is
// client. The error is a *FieldError for the field "by".
func parseBy(b By) ([]rulekey.Part, error) {
	parts, err := rulekey.Parse(string(b))
	if err != nil {
		return nil, fieldErr(err.Error(), "by")
	}
	return parts, nil
}
