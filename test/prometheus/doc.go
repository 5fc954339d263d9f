// Package prometheus runs the real Prometheus tools against what
// nodeproxy ships: promtool on the PrometheusRule's rules (checked and
// unit-tested as shipped), and a Prometheus server that scrapes a hub, a
// node endpoint and kube-apiserver with the shipped scrape settings, then
// evaluates every alert and every dashboard query on what it scraped.
//
//	overlays/prometheus/prometheusrule.yaml ---Rules------------> rule file --> promtool check/test rules
//	                                                                  |
//	overlays/prometheus/servicemonitor.yaml ---ServiceMonitorJob--+   v
//	overlays/prometheus/node-scrape-config.yaml --ScrapeConfigJob-+-> prometheus.yml --Start--> Server
//	overlays/prometheus/grafana-dashboard.json --DashboardQueries--> Server.Query
//	an alert's expression --Selectors--> the series it reads --> Server.Query
//
// (paths under manifests/). Service discovery is the one part of the
// shipped scrape settings replaced, by a static target carrying the
// labels discovery would give it.
//
// The binaries are the Debian package prometheus's (/usr/bin/prometheus,
// /usr/bin/promtool); without them every caller fails, naming the
// package (Tools): the tests that use them never skip.
//
// Harness: linked by tests only, never by a product binary
// (hack/boundaries).
package prometheus
