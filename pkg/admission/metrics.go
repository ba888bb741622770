package admission

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics counts what the gate did in this process, by app. Every process
// running the gate's scripts (httpapi replicas, wsnodes) counts what its
// own calls did, so the sums over processes are the totals.
type Metrics struct {
	admitted *prometheus.CounterVec
	dropouts *prometheus.CounterVec
	freed    *prometheus.CounterVec
	reentry  *prometheus.CounterVec
	waiting  *prometheus.GaugeVec

	mu sync.Mutex
	// lastWaiting is each channel's list length as this process last saw
	// it; the gauge is its sum per app.
	lastWaiting map[string]map[string]int
}

// NewMetrics registers the gate's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		admitted: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_admission_admitted_total",
			Help: "Users given a slot by this process's gate calls: direct (room and nobody waiting) or promoted (from the head of the list).",
		}, []string{"app", "how"}),
		dropouts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_admission_dropouts_total",
			Help: "Waiters struck from a list for not checking in within the dropout time.",
		}, []string{"app"}),
		freed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_admission_slots_freed_total",
			Help: "Seats freed because a ticket went unused, a leaver's grace ran out, or a subscribe was never recorded.",
		}, []string{"app"}),
		reentry: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_admission_grace_reentries_total",
			Help: "Members who left and subscribed again within the grace, keeping their slot.",
		}, []string{"app"}),
		waiting: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headcount_admission_waiting",
			Help: "Users on waiting lists, summed over the channels as this process last saw each.",
		}, []string{"app"}),
		lastWaiting: map[string]map[string]int{},
	}
}

// Observe records one gate call's changes and the list length it saw. A
// nil Metrics records nothing.
func (m *Metrics) Observe(app, channel string, st State, c Changes) {
	if m == nil {
		return
	}
	if n := len(c.Promoted); n > 0 {
		m.admitted.WithLabelValues(app, "promoted").Add(float64(n))
	}
	if n := len(c.Dropped); n > 0 {
		m.dropouts.WithLabelValues(app).Add(float64(n))
	}
	if n := len(c.Freed); n > 0 {
		m.freed.WithLabelValues(app).Add(float64(n))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	chans := m.lastWaiting[app]
	if chans == nil {
		chans = map[string]int{}
		m.lastWaiting[app] = chans
	}
	if st.Waiting == 0 {
		delete(chans, channel)
	} else {
		chans[channel] = st.Waiting
	}
	sum := 0
	for _, n := range chans {
		sum += n
	}
	m.waiting.WithLabelValues(app).Set(float64(sum))
}

// AdmittedDirectly counts a user admitted without waiting.
func (m *Metrics) AdmittedDirectly(app string) {
	if m != nil {
		m.admitted.WithLabelValues(app, "direct").Inc()
	}
}

// Reentered counts a member who came back within the grace.
func (m *Metrics) Reentered(app string) {
	if m != nil {
		m.reentry.WithLabelValues(app).Inc()
	}
}
