package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// configFiles is the runtime configuration both services are given: one
// envoyproxy/ratelimit runtime directory, read by envoyproxy/ratelimit and
// by `sluice serve` alike (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config). The
// files were written for this harness; they have the shapes of
// envoyproxy/ratelimit's integration test fixtures (domains basic, another,
// share-threshold-test and reload) and of its published example (domain rl,
// which its integration scripts drive), plus domains for every unit,
// wildcards, empty values and charges after the response.
var configFiles = map[string]string{
	"basic.yaml": `domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
	"another.yaml": `domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key4
    rate_limit: {unit: day, requests_per_unit: 20}
`,
	"share.yaml": `domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    value: t-*
    share_threshold: true
    descriptors:
      - key: op
        rate_limit: {unit: hour, requests_per_unit: 3}
`,
	"reload.yaml": `domain: reload
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: block
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
	"rl.yaml": `domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces: [{name: bkthomps}, {name: fake_name}]
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces: [{name: bkthomps}]
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: mock
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: destination_cluster
        value: override
        rate_limit:
          replaces: [{name: banned_limit}]
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: fake
        rate_limit: {name: fake_name, unit: minute, requests_per_unit: 2}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: bar
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: bar
        value: bkthomps
        rate_limit: {name: bkthomps, unit: minute, requests_per_unit: 1}
      - key: bar
        value: banned
        rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}
      - key: baz
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: baz
        value: not-so-shady
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: baz
        value: shady
        rate_limit: {unit: minute, requests_per_unit: 3}
        shadow_mode: true
      - key: bay
        rate_limit: {unlimited: true}
  - key: unspec
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: qux
    rate_limit: {unlimited: true}
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {service_with_quota: {name: service_1}}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {service_with_quota: {name: service_2}}
`,
	"units.yaml": `domain: units
descriptors:
  - key: u
    value: second
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: u
    value: minute
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: u
    value: hour
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: u
    value: day
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: u
    value: week
    rate_limit: {unit: week, requests_per_unit: 3}
  - key: u
    value: month
    rate_limit: {unit: month, requests_per_unit: 3}
  - key: u
    value: year
    rate_limit: {unit: year, requests_per_unit: 3}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 4294967295}
`,
	"wild.yaml": `domain: wild
descriptors:
  - key: path
    value: /v1/*
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: /v2/*/export
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: nest
    descriptors:
      - key: leaf
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: bare
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: client
    value: internal
    rate_limit: {unlimited: true}
`,
	"charge.yaml": `domain: charge
descriptors:
  - key: service
    value: service_2
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: cost
    rate_limit: {unit: minute, requests_per_unit: 10}
`,
}

// writeConfig writes configFiles as an envoyproxy/ratelimit runtime
// directory: root/ratelimit/config/*.yaml (RUNTIME_ROOT=root,
// RUNTIME_SUBDIRECTORY=ratelimit).
func writeConfig(root string) error {
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, text := range configFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("envoydiff: write %s: %w", name, err)
		}
	}
	return nil
}
