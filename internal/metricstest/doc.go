// Package metricstest reads metric values for tests: from a
// prometheus.Gatherer (a registry), from a text exposition already in
// hand, or from a /metrics URL over HTTP, each parsed by client_golang's
// own parsers. A series is chosen by its name and by some of its labels
// (the others are free); the values of every series chosen are summed, so
// no labels means the whole metric. A histogram's or summary's _count and
// _sum are read by those names, as /metrics writes them. Which names the
// binaries register is internal/metricnames'.
package metricstest
