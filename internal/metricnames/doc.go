// Package metricnames tells tests which metric names headcount's binaries
// register, and which queries a Grafana dashboard runs: each binary is
// built as its main builds it (New, which dials nothing, on the registry
// lifecycle.Main makes, with the Go and process collectors), and a name is
// looked up in those registries. A vector no request has touched yet is
// not on /metrics, so scraping would miss it; the registry's descriptors
// do not. Reading a metric's value is internal/metricstest's.
package metricnames
