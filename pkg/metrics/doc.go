// Package metrics builds the Prometheus registry a binary injects into its
// packages, and the handler that serves it. It defines no metrics itself:
// each package declares its own with promauto.With(reg), so tests can use a
// fresh registry and nothing is global.
package metrics
