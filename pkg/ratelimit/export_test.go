package ratelimit

import "github.com/prometheus/client_golang/prometheus"

// RejectedCounter is the rejections counter of app and kind.
func (m *Metrics) RejectedCounter(app string, kind Kind) prometheus.Counter {
	return m.rejected.WithLabelValues(app, string(kind))
}

// ErrorsCounter is the Redis errors counter of kind.
func (m *Metrics) ErrorsCounter(kind Kind) prometheus.Counter {
	return m.errors.WithLabelValues(string(kind))
}
