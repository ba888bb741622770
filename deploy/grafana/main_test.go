package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestCommittedDashboardIsGenerated: headcount.json is what this program
// writes, so an edit made to the JSON alone is caught.
func TestCommittedDashboardIsGenerated(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("headcount.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/grafana/headcount.json differs from the generator's output: edit deploy/grafana/main.go, then run\n\tgo run ./deploy/grafana > deploy/grafana/headcount.json")
	}
}

// TestDashboardShape checks what an import needs and the generator could
// get wrong: unique panel ids, panels that do not overlap, every query on
// the datasource variable with a refId and an expression, and the
// variables the queries use.
func TestDashboardShape(t *testing.T) {
	b, err := render()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Panels        []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *ref   `json:"datasource"`
			GridPos    struct{ H, W, X, Y int }
			Targets    []struct {
				Datasource ref    `json:"datasource"`
				Expr       string `json:"expr"`
				RefID      string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name     string `json:"name"`
				Type     string `json:"type"`
				AllValue string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, schemaVersion %d: want a uid and a schema of Grafana 9 or later", d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" && v.AllValue != ".*" {
			t.Errorf("variable %s: allValue %q, want .* (matches series without the label)", v.Name, v.AllValue)
		}
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("no datasource variable: %v", vars)
	}
	ids := map[int]string{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q runs past the grid's 24 columns", p.Title)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, taken := cells[[2]int{x, y}]; taken {
					t.Fatalf("panels %q and %q overlap at (%d, %d)", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || *p.Datasource != datasource || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %v, %d queries", p.Title, p.Datasource, len(p.Targets))
		}
		for _, q := range p.Targets {
			if q.Datasource != datasource || q.RefID == "" || !strings.Contains(q.Expr, "headcount_") {
				t.Errorf("panel %q: query %+v", p.Title, q)
			}
			for _, v := range []string{"namespace", "app", "node"} {
				if strings.Contains(q.Expr, "$"+v) && vars[v] != "query" {
					t.Errorf("panel %q uses $%s, which is not a variable", p.Title, v)
				}
			}
			if !strings.Contains(q.Expr, `namespace=~"$namespace"`) {
				t.Errorf("panel %q: a query ignores the namespace: %s", p.Title, q.Expr)
			}
		}
	}
}
