package metricstest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// ErrAbsent is Read's error when the page has no series chosen.
var ErrAbsent = errors.New("no such series")

// Families are metric families by name, as gathered or parsed.
type Families map[string]*dto.MetricFamily

// Gather reads g's families.
func Gather(g prometheus.Gatherer) (Families, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := make(Families, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out, nil
}

// Parse reads a text exposition, as /metrics serves it.
func Parse(exposition string) (Families, error) {
	return parse(strings.NewReader(exposition))
}

func parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// client neither keeps a connection (whose goroutines would outlive a
// test that checks for leaks) nor asks for gzip (whose writer would show
// in the memory of the process scraped), and gives up in time, so a poll
// of a stuck process ends.
var client = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true},
}

// Scrape fetches and parses the /metrics page at url.
func Scrape(url string) (Families, error) { return ScrapeWith(client, url) }

// ScrapeWith is Scrape with c, for a caller that keeps its connections.
func ScrapeWith(c *http.Client, url string) (Families, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parse(resp.Body)
}

// Read is Sum of the page at url, with ErrAbsent when nothing is chosen.
// It takes no testing.T: polls call it until it answers.
func Read(url, name string, labels ...string) (float64, error) {
	f, err := Scrape(url)
	if err != nil {
		return 0, err
	}
	v, ok := f.Sum(name, labels...)
	if !ok {
		return 0, fmt.Errorf("%s%v at %s: %w", name, labels, url, ErrAbsent)
	}
	return v, nil
}

// Sum adds the values of name's series whose labels include labels, given
// as name, value pairs; ok is false when none does.
func (f Families) Sum(name string, labels ...string) (sum float64, ok bool) {
	if len(labels)%2 != 0 {
		panic(fmt.Sprintf("metricstest: labels %q are not name, value pairs", labels))
	}
	mf, value := f.lookup(name)
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if has(m, labels) {
			sum += value(m)
			ok = true
		}
	}
	return sum, ok
}

// Value is Sum, or -1 when nothing is chosen: a value no counter or gauge
// of a test takes, so that an absent series fails a comparison.
func (f Families) Value(name string, labels ...string) float64 {
	if v, ok := f.Sum(name, labels...); ok {
		return v
	}
	return -1
}

// LabelValues returns label's value on each of name's series that has it.
func (f Families) LabelValues(name, label string) []string {
	mf, _ := f.lookup(name)
	var out []string
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

// lookup finds name's family and how to read a series' value: a family of
// that name, or a histogram or summary whose _count or _sum it is.
func (f Families) lookup(name string) (*dto.MetricFamily, func(*dto.Metric) float64) {
	if mf, ok := f[name]; ok {
		return mf, SampleValue
	}
	if base, ok := strings.CutSuffix(name, "_count"); ok && f[base] != nil {
		return f[base], func(m *dto.Metric) float64 {
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return float64(m.GetSummary().GetSampleCount())
		}
	}
	if base, ok := strings.CutSuffix(name, "_sum"); ok && f[base] != nil {
		return f[base], func(m *dto.Metric) float64 {
			if h := m.GetHistogram(); h != nil {
				return h.GetSampleSum()
			}
			return m.GetSummary().GetSampleSum()
		}
	}
	return nil, nil
}

// SampleValue is a counter's, gauge's or untyped sample's value.
func SampleValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// has reports whether m carries every name, value pair of labels.
func has(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Value is Sum of what g gathers now, or -1 when nothing is chosen; it
// fails t only when g cannot gather.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	f, err := Gather(g)
	require.NoError(t, err)
	return f.Value(name, labels...)
}
