// Package deploy holds no code: its folders are the files sluice is
// deployed with (container image, Kubernetes manifests, systemd unit,
// Prometheus rules, Grafana dashboard), and its tests check them against
// the binary they deploy: the image is built and run, the manifests are
// decoded strictly into the Kubernetes API types, every flag and variable
// they set exists, the unit passes systemd-analyze, the alert rules pass
// promtool's tests, and every metric the rules and the dashboard name is
// exported. See docs/deploy.md.
package deploy
