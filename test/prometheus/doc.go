// Package prometheus runs the real Prometheus tools against what
// nodeproxy ships: promtool on the PrometheusRule's rules (checked and
// unit-tested as shipped), and a Prometheus server that scrapes a hub, a
// node endpoint and kube-apiserver with the shipped scrape settings, then
// evaluates every alert and every dashboard query on what it scraped.
//
//	manifests/overlays/prometheus/prometheusrule.yaml --Rules-->  groups file --promtool check/test rules
//	manifests/overlays/prometheus/servicemonitor.yaml --ServiceMonitorJob--+
//	manifests/node/prometheus-scrape-config.yaml ------NodeScrapeJob-------+--> prometheus.yml --Start--> Server
//	manifests/overlays/prometheus/grafana-dashboard.json --DashboardQueries--> Server.Query
//
// The binaries are the Debian package prometheus's (/usr/bin/prometheus,
// /usr/bin/promtool); without them every caller fails, naming the
// package (Tools): the tests that use them never skip.
//
// Harness: linked by tests only, never by a product binary
// (hack/boundaries).
package prometheus
