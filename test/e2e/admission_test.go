package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/auth"
)

// admissionCall POSTs or DELETEs {"user_id": user} to a channel's admission
// route of app (key/secret) on addr, signed, and decodes the answer.
func admissionCall(c *http.Client, addr, method, app, key, secret, channel, user string) (map[string]any, error) {
	path := "/apps/" + app + "/channels/" + channel + "/admission"
	body := []byte(`{"user_id":"` + user + `"}`)
	q := auth.SignRequest(method, path, nil, body, key, secret, time.Now())
	req, err := http.NewRequest(method, "http://"+addr+path+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: status %d, %v", method, path, resp.StatusCode, err) //nolint:errorlint // err is nil when only the status is wrong, which %w would print as %!w(<nil>)
	}
	return m, nil
}

// TestAdmissionThroughReplicas: 1,000 users ask at once for a channel of
// capacity 30 through 3 httpapi processes: exactly 30 are admitted and the
// rest wait at distinct positions 1..970; as participants leave, the head
// of the list is admitted and nobody jumps the queue; a waiter who stops
// checking in is struck while one who checks in keeps the place.
func TestAdmissionThroughReplicas(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	appsFile := filepath.Join(t.TempDir(), "apps.json")
	if err := os.WriteFile(appsFile, []byte(`[
	  {"id": "big", "key": "big-key", "secret": "big-secret",
	   "capacities": [{"prefix": "presence-room-", "capacity": 30}],
	   "admission": {"dropoutSeconds": 120, "graceSeconds": 10, "ticketSeconds": 120}},
	  {"id": "quick", "key": "quick-key", "secret": "quick-secret",
	   "capacities": [{"prefix": "presence-", "capacity": 1}],
	   "admission": {"dropoutSeconds": 1, "graceSeconds": 1, "ticketSeconds": 120}}
	]`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := redistest.New(t)
	apis := startHTTPAPIs(t, 3, "--redis", srv.URL(), "--apps-file", appsFile)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(c.CloseIdleConnections)

	const users, capacity = 1000, 30
	answers := make([]map[string]any, users)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() {
			for i := range work {
				m, err := admissionCall(c, apis[i%3].addr, http.MethodPost, "big", "big-key", "big-secret", "presence-room-1", fmt.Sprint("u", i))
				if err != nil {
					t.Error(err)
				}
				answers[i] = m
			}
		})
	}
	for i := range users {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var admitted []string
	byPosition := make([]string, users-capacity+1)
	for i, m := range answers {
		switch m["status"] {
		case "admitted":
			admitted = append(admitted, fmt.Sprint("u", i))
		case "waiting":
			p := int(m["position"].(float64))
			if p < 1 || p >= len(byPosition) || byPosition[p] != "" {
				t.Fatalf("u%d: position %d out of range or given twice (%v)", i, p, m)
			}
			byPosition[p] = fmt.Sprint("u", i)
		default:
			t.Fatalf("u%d: %v", i, m)
		}
	}
	if len(admitted) != capacity {
		t.Fatalf("%d admitted, want exactly %d", len(admitted), capacity)
	}
	for p := 1; p < len(byPosition); p++ {
		if byPosition[p] == "" {
			t.Fatalf("position %d given to nobody", p)
		}
	}

	// Five participants leave, each through another replica: the first
	// five of the list are admitted, in order, and the sixth is now head.
	for k := range 5 {
		if _, err := admissionCall(c, apis[k%3].addr, http.MethodDelete, "big", "big-key", "big-secret", "presence-room-1", admitted[k]); err != nil {
			t.Fatal(err)
		}
		head, err := admissionCall(c, apis[(k+1)%3].addr, http.MethodPost, "big", "big-key", "big-secret", "presence-room-1", byPosition[k+1])
		if err != nil {
			t.Fatal(err)
		}
		next, err := admissionCall(c, apis[(k+2)%3].addr, http.MethodPost, "big", "big-key", "big-secret", "presence-room-1", byPosition[k+2])
		if err != nil {
			t.Fatal(err)
		}
		if head["status"] != "admitted" || next["position"] != 1.0 {
			t.Fatalf("after leave %d: head %s got %v, next %s got %v", k+1, byPosition[k+1], head, byPosition[k+2], next)
		}
	}

	// Dropouts (app "quick": capacity 1, dropout 1 s): "silent" stops
	// checking in and is struck; "faithful", behind it, checks in and moves up.
	for _, u := range []string{"in", "silent", "faithful"} {
		if _, err := admissionCall(c, apis[0].addr, http.MethodPost, "quick", "quick-key", "quick-secret", "presence-q", u); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := admissionCall(c, apis[1].addr, http.MethodPost, "quick", "quick-key", "quick-secret", "presence-q", "faithful")
		if err != nil {
			t.Fatal(err)
		}
		if m["position"] == 1.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the silent waiter was never struck: %v", m)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Coming back, the silent one starts again at the tail.
	m, err := admissionCall(c, apis[2].addr, http.MethodPost, "quick", "quick-key", "quick-secret", "presence-q", "silent")
	if err != nil {
		t.Fatal(err)
	}
	if m["position"] != 2.0 {
		t.Fatalf("struck waiter came back at %v, want the tail (2)", m)
	}
	if got := sumMetric(t, apis, "headcount_admission_dropouts_total", "app", "quick"); got != 1 {
		t.Fatalf("dropouts counted over the replicas: %v, want 1", got)
	}
	if got := sumMetric(t, apis, "headcount_admission_admitted_total", "app", "big", "how", "promoted"); got != 5 {
		t.Fatalf("promotions counted over the replicas: %v, want 5", got)
	}
}
