package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

// gathered sums every series of one metric family of reg, so tests can read
// counters whatever their labels.
type gathered struct {
	reg  *prometheus.Registry
	name string
}

func (g *gathered) Describe(chan<- *prometheus.Desc) {}

func (g *gathered) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := g.reg.Gather()
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != g.name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "sum", nil, nil), prometheus.UntypedValue, sum)
}
