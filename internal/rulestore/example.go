package rulestore

// fileHeader opens every rules file sluice creates: the file explains
// itself to whoever opens it. API writes keep it, and every other comment.
const fileHeader = `# sluice rules
#
# sluice reads this file at start and checks it every second: a saved edit
# is in force within seconds, with no restart. An edit that does not load (a
# YAML error or an invalid rule) is logged and shown on /readyz, and sluice
# keeps serving the last rules that loaded until the file is fixed.
# Changes made through the admin API (PUT /rules/{id}, PUT /clients/{id},
# POST /apply, ...) rewrite this file, keeping the order of its keys, its
# comments and every rule and client they do not change.
#
# revision       bumped by sluice on every change; leave it to sluice.
# default_plan   the plan of callers that are not listed under clients.
# clients        client -> plan, e.g.  "api_key:k_live_42": {plan: partner}
#                clients are "user:<id>", "api_key:<key>" or
#                "ip:<address or prefix>" (canonical: "ip:2001:db8::/64").
# rules          every enabled rule whose match fits a call applies; the
#                call passes only if all of them allow it. A rule has:
#   id             required; 1-64 of a-z 0-9 . _ - starting with a letter
#                  or digit; unique.
#   description    optional free text.
#   match          optional; a missing key matches anything:
#     plan           the caller's plan, e.g. free.
#     endpoint       "METHOD /path": "GET /api/orders", "* /api/*",
#                    "POST /login".
#   by             whose bucket counts the call: client (the user, else the
#                  API key, else the IP; the default) | user | api_key | ip.
#   limit          required; calls per window, 1 or more.
#   window         required; e.g. 500ms, 1s, 1m, 1h, 24h, 7d.
#   burst          token_bucket: bucket capacity (default: limit);
#                  leaky_bucket: extra calls tolerated (default 1);
#                  not allowed with the other algorithms.
#   algorithm      token_bucket (default) | leaky_bucket | fixed_window |
#                  sliding_window | sliding_log (limit at most 10000).
#   failure_mode   open (default): while the shared counter store is down,
#                  serve from a coarse local limit | closed: deny meanwhile.
#   shadow         true: evaluate and report, never deny (default false).
#   enabled        false: keep the rule but do not apply it (default true).
`

// exampleFile is what OpenFile writes when the rules file is missing: the
// header, an example rule commented out, and an empty rule set.
const exampleFile = fileHeader + `
# An example: uncomment these lines and delete "rules: []" below to limit
# every caller on the free plan to 100 calls a minute.
#
# rules:
#   - id: free-per-user
#     description: Free plan, 100 calls a minute per caller
#     match: {plan: free}
#     by: client
#     limit: 100
#     window: 1m
#     burst: 100
#     algorithm: token_bucket
#     failure_mode: open
#     shadow: false
#     enabled: true
#
# clients:
#   "api_key:k_live_42": {plan: partner}

revision: 0
default_plan: free
rules: []
`
