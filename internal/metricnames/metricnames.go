package metricnames

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/cleaner"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/httpapi"
	"github.com/headcount/headcount/pkg/metrics"
	"github.com/headcount/headcount/pkg/wsnode"
)

// Binaries holds the registries of wsnode, cleaner and httpapi.
type Binaries []*prometheus.Registry

// Build builds each binary as its main does, on loopback with no admin
// port, and returns the registries they registered their metrics on. New
// dials nothing, so Redis need not run; Stop runs when the test ends.
func Build(t *testing.T) Binaries {
	t.Helper()
	noEnv := func(string) (string, bool) { return "", false }
	common := []string{"--redis", "redis://127.0.0.1:1", "--log-level", "error", "--admin-addr", ""}
	regs := Binaries{metrics.NewRegistry(), metrics.NewRegistry(), metrics.NewRegistry()}

	ws, err := config.ParseWSNode(append([]string{"--addr", "127.0.0.1:0"}, common...), noEnv, io.Discard)
	require.NoError(t, err)
	w, err := wsnode.New(wsnode.Options{Config: ws, Registry: regs[0]})
	require.NoError(t, err)
	t.Cleanup(w.Stop)

	cl, _, err := config.ParseCleaner(common, noEnv, io.Discard)
	require.NoError(t, err)
	c, err := cleaner.New(cleaner.Options{Config: cl, Registry: regs[1]})
	require.NoError(t, err)
	t.Cleanup(c.Stop)

	api, err := config.ParseHTTPAPI(append([]string{"--addr", "127.0.0.1:0"}, common...), noEnv, io.Discard)
	require.NoError(t, err)
	h, err := httpapi.New(httpapi.Options{Config: api, Registry: regs[2]})
	require.NoError(t, err)
	t.Cleanup(h.Stop)
	return regs
}

// Registered reports whether one of the binaries registers a metric that
// exposes name: the metric itself, or a histogram's or summary's _bucket,
// _sum or _count.
func (b Binaries) Registered(t *testing.T, name string) bool {
	t.Helper()
	candidates := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			candidates = append(candidates, base)
		}
	}
	for _, reg := range b {
		for _, c := range candidates {
			if has(t, reg, c) {
				return true
			}
		}
	}
	return false
}

// has reports whether reg has a collector describing a metric named name.
// A Registry does not list its collectors, but refuses one whose
// descriptor has a registered name with other labels or help: a probe of
// that name is refused exactly when the name is taken.
func has(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	p := probe{prometheus.NewDesc(name, "probe for "+name, []string{"probe_label"}, nil)}
	err := reg.Register(p)
	if err == nil {
		reg.Unregister(p)
		return false
	}
	var already prometheus.AlreadyRegisteredError
	require.False(t, errors.As(err, &already), "probe of %s", name)
	return true
}

type probe struct{ desc *prometheus.Desc }

func (p probe) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }
func (p probe) Collect(chan<- prometheus.Metric)    {}
