package metricnames

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// DashboardQueries returns every PromQL expression of a Grafana dashboard
// (its JSON): each panel's targets and each query variable's query.
func DashboardQueries(t *testing.T, dashboard []byte) []string {
	t.Helper()
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(dashboard, &d))
	var out []string
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			out = append(out, q.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if s, ok := v.Query.(string); ok && v.Type == "query" {
			out = append(out, s)
		}
	}
	require.NotEmpty(t, out, "no queries in the dashboard")
	return out
}
