package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	pusher "github.com/pusher/pusher-http-go/v5"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
)

// prometheusBin is Debian's prometheus package's server
// (scripts/ensure-deps.sh installs it).
const prometheusBin = "/usr/bin/prometheus"

// promNamespace is the namespace label the test's scrape gives the
// targets, as a Kubernetes scrape would.
const promNamespace = "headcount-e2e"

// TestPrometheusSeesTheCluster runs a real Prometheus (1 s scrapes and rule
// evaluations, deploy/prometheus/alerts.yaml loaded) against two wsnodes, a
// cleaner and an httpapi on one Redis and a third wsnode on a Redis of its
// own, labelled as a Kubernetes scrape of the headcount-metrics Service
// labels them, except the httpapi, scraped as outside Kubernetes (no
// namespace, no pod): the dashboard's "All" must match it too; and a
// redis_exporter reading the shared Redis. It drives
// traffic (sockets on the nodes, publishes, reads, admission, a rate limit,
// webhooks) and checks that no alert is pending or firing on the healthy
// cluster; then it provokes what the alerts watch: a wsnode killed
// (SIGKILL), reaped as the cleaner's watch of it ends; a wsnode hung (SIGSTOP)
// until the cleaner reaps it by its stale heartbeat, then SIGKILLed; a
// count corrupted in Redis behind the scripts' backs, which the cleaner's
// audit reports as drift; the third wsnode's Redis killed, so it is not
// ready and counts Redis errors; a webhook receiver answering 503; an entry
// in the app's event log the deliverer cannot read, which it gives up. Each
// alert that watches these must reach "firing" in /api/v1/alerts. Last,
// every query of every panel of deploy/grafana/headcount.json, with the
// variables at "All", must run, and return data (but those of notScraped),
// and each variable's query its values.
func TestPrometheusSeesTheCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	if _, err := os.Stat(prometheusBin); err != nil {
		t.Fatalf("%s is missing: install Debian's prometheus package (scripts/ensure-deps.sh does): %v", prometheusBin, err)
	}
	binaries(t) // built once per run; not part of the time measured
	began := time.Now()
	rcv := newSwitchedReceiver(t)
	appsFile := writeAppsFile(t, []map[string]any{
		{
			"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret,
			"webhooks": []map[string]any{{"url": rcv.URL + "/hook",
				"event_types": []string{"channel_occupied", "channel_vacated", "member_added", "member_removed"}}},
		},
		{
			"id": "capped", "key": "capped-key", "secret": "capped-secret",
			"maxBackendEventsPerSecond": 1,
			"capacities":                []map[string]any{{"prefix": "presence-room-", "capacity": 1}},
			"admission":                 map[string]any{"dropoutSeconds": 1, "graceSeconds": 1, "ticketSeconds": 120},
		},
	})
	srv := redistest.New(t)
	rdb := srv.Client(t)
	common := []string{"--redis", srv.URL(), "--apps-file", appsFile}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	// A node that dies of a SIGKILL, reaped as its watch ends.
	killed := startWSNode(t, "ws-killed", common...)
	cl := startCleaner(t, "cleaner", common...)
	lone := redistest.New(t)
	c := startWSNode(t, "ws-c", "--redis", lone.URL(), "--apps-file", appsFile)
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", append(common, "--addr", api.addr, "--admin-addr", api.admin)...)
	// A maxmemory, as the chart's Redis has, for the Redis row's line of it.
	if err := rdb.ConfigSet(t.Context(), "maxmemory", "1gb").Err(); err != nil {
		t.Fatal(err)
	}
	exporter := redistest.NewExporter(t, srv, "")
	k8s := func(pod, container string) map[string]string {
		return map[string]string{"namespace": promNamespace, "pod": pod, "container": container,
			"service": "headcount-metrics", "endpoint": "metrics"}
	}
	prom := startPrometheus(t, []scrapeTarget{
		{"headcount-metrics", a.admin, k8s("headcount-wsnode-a", "wsnode")},
		{"headcount-metrics", b.admin, k8s("headcount-wsnode-b", "wsnode")},
		{"headcount-metrics", c.admin, k8s("headcount-wsnode-c", "wsnode")},
		{"headcount-metrics", cl.admin, k8s("headcount-cleaner-0", "cleaner")},
		{"httpapi", api.admin, nil},
		{"redis", exporter.Addr, map[string]string{"namespace": promNamespace, "pod": "redis-0", "container": "redis-exporter"}},
	})
	// Prometheus first scrapes about 5 s after it starts (its scrape
	// manager applies targets every 5 s): the processes start meanwhile.
	for _, n := range []node{a, b, c, killed, cl, api} {
		waitReady(t, n.p, n.admin)
	}
	pollProm(t, 10*time.Second, "every target scraped", func() (bool, string) {
		up := prom.query(`up == 1`)
		return len(up) == 6, fmt.Sprintf("%d of 6 targets up", len(up))
	})
	t.Logf("cluster and Prometheus up after %v", time.Since(began).Round(time.Millisecond))

	// Traffic: sockets on both nodes (a presence channel among them),
	// events published to them, reads, admission with a dropout, and a
	// backend-event limit exceeded.
	client := &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret, Host: api.addr}
	for i, n := range []node{a, a, a, b, b, b, c} {
		conn, id := wsConnect(t, n.addr)
		wsSubscribe(t, conn, "", "news", "")
		wsSubscribe(t, conn, id, "presence-lobby", fmt.Sprintf(`{"user_id":"u%d"}`, i))
		drainSocket(conn)
	}
	for i := range 10 {
		if err := client.Trigger("news", "tick", strconv.Itoa(i)); err != nil {
			t.Fatalf("trigger: %v", err)
		}
	}
	if _, err := client.Channels(pusher.ChannelsParams{}); err != nil {
		t.Fatalf("GET /channels: %v", err)
	}
	if _, err := client.Channel("news", pusher.ChannelParams{}); err != nil {
		t.Fatalf("GET /channels/news: %v", err)
	}
	driveAdmission(t, api.addr)
	capped := &pusher.Client{AppID: "capped", Key: "capped-key", Secret: "capped-secret", Host: api.addr}
	refused := 0
	for range 5 {
		if capped.Trigger("capped-news", "tick", "x") != nil {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("5 events at once to an app limited to 1 a second: none refused")
	}
	waitFor(t, 20*time.Second, "the webhook receiver's first delivery", func() bool { return rcv.delivered.Load() > 0 })

	// A healthy cluster pages nobody. Before the first scrapes the absent()
	// rules hold for a moment; once every target is scraped, nothing may
	// stay pending or firing.
	names := loadedAlerts(t, prom)
	pollProm(t, 20*time.Second, "no alert pending or firing on the healthy cluster", func() (bool, string) {
		pending, firing := prom.alertsIn("pending"), prom.alertsIn("firing")
		return len(pending)+len(firing) == 0, fmt.Sprint("pending: ", pending, ", firing: ", firing)
	})
	t.Logf("healthy: %d alert rules loaded, none pending or firing (%v)", len(names), time.Since(began).Round(time.Millisecond))

	// More reads and a webhook delivered, scrapes after the first: a
	// histogram's series is born with its first observations in it, so a
	// rate (and the panels' quantiles) needs some after a scrape saw it.
	if _, err := client.Channels(pusher.ChannelsParams{}); err != nil {
		t.Fatalf("GET /channels: %v", err)
	}
	if _, err := client.Channel("news", pusher.ChannelParams{}); err != nil {
		t.Fatalf("GET /channels/news: %v", err)
	}
	delivered := rcv.delivered.Load()
	again, _ := wsConnect(t, a.addr)
	wsSubscribe(t, again, "", "again", "")
	waitFor(t, 20*time.Second, "another webhook delivered", func() bool { return rcv.delivered.Load() > delivered })

	// A killed wsnode, once the active cleaner watches it (and a and b):
	// the watch's end reaps it at once.
	gone, _ := wsConnect(t, killed.addr)
	wsSubscribe(t, gone, "", "news", "")
	waitMetricAtLeast(t, cl.admin, "headcount_cleaner_watched_nodes", 3, 20*time.Second)
	killed.p.kill(t)
	waitFor(t, 10*time.Second, "the killed node reaped as its watch ended", func() bool {
		return reapedBy(cl.admin, "watch_ended") >= 1
	})

	// A hung wsnode: SIGSTOPped, it keeps its Redis connections, so the
	// cleaner reaps it only when its heartbeat goes stale (dead-after).
	// Then it is SIGKILLed: down for good.
	b.p.signal(syscall.SIGSTOP)
	waitFor(t, 10*time.Second, "the hung node reaped by its stale heartbeat", func() bool {
		return reapedBy(cl.admin, "heartbeat_stale") >= 1
	})
	b.p.kill(t)

	// The third node's Redis dies: the node is not ready, and its flushes
	// and pub/sub fail.
	lone.Kill()

	// Drift: a channel count no node holds, written behind the scripts'
	// backs; the cleaner's audit (an app every 5 s) finds it.
	if err := counts.CorruptChannel(t.Context(), rdb, keyspace.Space{}, e2eAppID, "ghost", 1); err != nil {
		t.Fatal(err)
	}

	// The webhook receiver fails: the next event's deliveries fail and are
	// retried. An event given up after the retry window takes five minutes
	// of failures; the deliverer also gives up an entry of the log it
	// cannot read, counted by the same headcount_webhook_dropped_total
	// (reason="unreadable"), so one is put in the log through the log's
	// own Append.
	rcv.failing.Store(true)
	late, _ := wsConnect(t, a.addr)
	wsSubscribe(t, late, "", "late", "")
	if _, _, err := eventlog.For(keyspace.Space{}, e2eAppID).Append(t.Context(), rdb, 0, "not an event"); err != nil {
		t.Fatal(err)
	}

	provoked := time.Now()
	waitAlertsFiring(t, prom, names, 45*time.Second, expectedAlerts...)
	t.Logf("alerts fired within %v of the provocations", time.Since(provoked).Round(time.Millisecond))

	checkDashboard(t, prom, filepath.Join(repoRoot(t), "deploy", "grafana", "headcount.json"), map[string][]string{
		"namespace": {promNamespace},
		"app":       {e2eAppID, "capped"},
		"node":      {a.admin, b.admin, c.admin},
		"redis":     {exporter.Addr},
	})
	t.Logf("wall time %v", time.Since(began).Round(time.Millisecond))
}

// expectedAlerts are the alerts of deploy/prometheus/alerts.yaml the
// provocations above must fire.
//
// Not provoked: an event given up after its retry window and
// HeadcountWebhookBacklogOld (an event pending 2 minutes) take minutes of
// failures, and the rest (no cleaner, no ready node or httpapi, lease
// flapping, socket and connection caps, slow consumers, API 5xx, apps
// source or apps out of sync) outages of the whole cluster or loads this
// test does not make; deploy/prometheus/alerts_test.yaml tests each rule's
// expression with promtool.
var expectedAlerts = []string{
	"HeadcountNodeReapedByHeartbeat", // the hung wsnode
	"HeadcountCountDrift",            // the corrupted count
	"HeadcountWsnodeNotReady",        // the wsnode whose Redis died
	"HeadcountRedisErrors",           // its failing flushes and pub/sub
	"HeadcountWebhookEventsGivenUp",  // the unreadable entry
}

// drainSocket reads and discards what the server sends c, so it answers
// pings and never fills its queue, until c closes.
func drainSocket(c *websocket.Conn) {
	go func() {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				return
			}
		}
	}()
}

// driveAdmission fills the capped app's presence-room-1 (capacity 1): one
// user admitted, two waiting; the first waiter stops checking in and is
// struck (dropout 1 s) while the second checks in and moves up.
func driveAdmission(t *testing.T, addr string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	call := func(user string) map[string]any {
		m, err := admissionCall(c, addr, http.MethodPost, "capped", "capped-key", "capped-secret", "presence-room-1", user)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, u := range []string{"in", "silent", "faithful"} {
		call(u)
	}
	waitFor(t, 10*time.Second, "the silent waiter struck", func() bool { return call("faithful")["position"] == 1.0 })
}

// switchedReceiver is a webhook endpoint that answers 200, or 503 once
// failing is set.
type switchedReceiver struct {
	*httptest.Server
	failing   atomic.Bool
	delivered atomic.Int64
}

func newSwitchedReceiver(t *testing.T) *switchedReceiver {
	r := &switchedReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if r.failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		r.delivered.Add(1)
	}))
	t.Cleanup(r.Close)
	return r
}

// scrapeTarget is one /metrics endpoint, its job and its target labels.
type scrapeTarget struct {
	job, addr string
	labels    map[string]string
}

// promServer is a running Prometheus's HTTP API.
type promServer struct {
	t    *testing.T
	base string
}

// startPrometheus runs prometheusBin on a free loopback port, scraping
// targets every second and evaluating deploy/prometheus/alerts.yaml every
// second, its data in a temporary directory; cleanup stops it.
func startPrometheus(t *testing.T, targets []scrapeTarget) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The rules' for: durations are minutes, chosen for production; the
	// test shortens them to 5 s, and changes nothing else (expressions and
	// thresholds are loaded as written), so an alert fires within seconds
	// of its expression holding. 5 s, not less: a scrape that a loaded
	// machine makes late must not fire an absent() rule.
	rules = regexp.MustCompile(`(?m)^(\s*for:\s*)\S+`).ReplaceAll(rules, []byte("${1}5s"))
	rulesPath := filepath.Join(dir, "alerts.yaml")
	if err := os.WriteFile(rulesPath, rules, 0o600); err != nil {
		t.Fatal(err)
	}
	jobs := map[string][]map[string]any{}
	var order []string
	for _, tg := range targets {
		if _, ok := jobs[tg.job]; !ok {
			order = append(order, tg.job)
		}
		jobs[tg.job] = append(jobs[tg.job], map[string]any{"targets": []string{tg.addr}, "labels": tg.labels})
	}
	var scrapes []map[string]any
	for _, job := range order {
		scrapes = append(scrapes, map[string]any{"job_name": job, "static_configs": jobs[job]})
	}
	// JSON is YAML: Prometheus reads this as its config file.
	cfg, err := json.Marshal(map[string]any{
		"global":         map[string]string{"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
		"rule_files":     []string{rulesPath},
		"scrape_configs": scrapes,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := start(t, "prometheus", prometheusBin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	waitOK(t, p, "http://"+addr+"/-/ready", 30*time.Second)
	return &promServer{t: t, base: "http://" + addr}
}

// get reads path of the HTTP API with query into data, failing t on an
// error or a status other than success.
func (p *promServer) get(path string, query url.Values, data any) {
	p.t.Helper()
	resp, err := http.Get(p.base + path + "?" + query.Encode())
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		p.t.Fatalf("%s: %v", path, err)
	}
	if body.Status != "success" {
		p.t.Fatalf("%s?%s: %s", path, query.Encode(), body.Error)
	}
	if err := json.Unmarshal(body.Data, data); err != nil {
		p.t.Fatalf("%s: %v", path, err)
	}
}

// query evaluates expr now and returns the values of its samples (a
// scalar is one).
func (p *promServer) query(expr string) []float64 {
	p.t.Helper()
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	p.get("/api/v1/query", url.Values{"query": {expr}}, &data)
	var points [][2]any
	switch data.ResultType {
	case "vector":
		var v []struct {
			Value [2]any `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &v); err != nil {
			p.t.Fatal(err)
		}
		for _, s := range v {
			points = append(points, s.Value)
		}
	case "scalar":
		var s [2]any
		if err := json.Unmarshal(data.Result, &s); err != nil {
			p.t.Fatal(err)
		}
		points = append(points, s)
	default:
		p.t.Fatalf("%s: result type %s", expr, data.ResultType)
	}
	out := make([]float64, 0, len(points))
	for _, pt := range points {
		s, _ := pt[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			p.t.Fatalf("%s: value %v", expr, pt[1])
		}
		out = append(out, v)
	}
	return out
}

// alertsIn returns the names of the alerts in state (pending, firing).
func (p *promServer) alertsIn(state string) []string { return p.alertsWith(state, "") }

// alertsWith returns the names of the alerts in state whose severity label
// is severity ("": any).
func (p *promServer) alertsWith(state, severity string) []string {
	p.t.Helper()
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	p.get("/api/v1/alerts", nil, &data)
	var names []string
	for _, a := range data.Alerts {
		if a.State == state && (severity == "" || a.Labels["severity"] == severity) && !slices.Contains(names, a.Labels["alertname"]) {
			names = append(names, a.Labels["alertname"])
		}
	}
	slices.Sort(names)
	return names
}

// loadedAlerts waits until Prometheus has loaded the alert rules of
// deploy/prometheus/alerts.yaml and returns their names.
func loadedAlerts(t *testing.T, p *promServer) []string {
	t.Helper()
	var names []string
	pollProm(t, 10*time.Second, "the alert rules loaded", func() (bool, string) {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name string `json:"name"`
				} `json:"rules"`
			} `json:"groups"`
		}
		p.get("/api/v1/rules", url.Values{"type": {"alert"}}, &data)
		names = names[:0]
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				names = append(names, r.Name)
			}
		}
		return len(names) > 0, "no alert rule loaded"
	})
	return names
}

// waitAlertsFiring waits until each of want, all rules Prometheus loaded,
// has been seen firing in /api/v1/alerts, and fails if meanwhile an alert
// of severity page fired: nothing provoked is an outage of the cluster (no
// cleaner, no ready wsnode or httpapi), so a page would be a false alarm.
func waitAlertsFiring(t *testing.T, p *promServer, loaded []string, within time.Duration, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(loaded, w) {
			t.Fatalf("alert %s is not among the rules deploy/prometheus/alerts.yaml loaded: %v", w, loaded)
		}
	}
	seen, pages := map[string]bool{}, map[string]bool{}
	defer func() {
		if len(pages) > 0 {
			t.Errorf("pages fired, though no provocation is an outage: %v", slices.Sorted(mapKeys(pages)))
		}
	}()
	pollProm(t, within, "the provoked alerts firing", func() (bool, string) {
		for _, name := range p.alertsIn("firing") {
			seen[name] = true
		}
		for _, name := range p.alertsWith("firing", "page") {
			pages[name] = true
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return seen[w] })
		return len(missing) == 0, fmt.Sprintf("never firing: %v; pending now: %v; firing seen: %v", missing, p.alertsIn("pending"), slices.Sorted(mapKeys(seen)))
	})
}

// pollProm polls cond every 200 ms (a fifth of the scrape and evaluation
// interval) until it holds, failing t with what cond last said after
// within.
func pollProm(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %s", what, within, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// grafanaVars are a dashboard's variables as Grafana substitutes them with
// "All" chosen, and its range and rate intervals as a window that covers
// the whole test, so a counter that moved at any time in it shows.
func grafanaVars(expr string) string {
	return strings.NewReplacer(
		"$namespace", ".*", "$app", ".*", "$node", ".*", "$redis", ".*",
		"$__rate_interval", "5m", "$__interval", "5m", "$__range", "5m",
	).Replace(expr)
}

// notScraped are the metrics of panels this test has no source for, and
// why; deploy/grafana's TestDashboardMetricsExist says where each comes
// from, deploy/prometheus's TestRedisExporterMetrics checks the redis_
// ones against a real exporter of each kind of Redis.
var notScraped = map[string]string{
	"kube_pod_container_resource_limits":       "kube-state-metrics: no Kubernetes here",
	"kube_pod_container_status_restarts_total": "kube-state-metrics: no Kubernetes here",
	"redis_master_link_up":                     "a replica's: the test's Redis is a primary",
	"redis_cluster_state":                      "a Cluster node's: the test's Redis is a single server",
	"go_gc_gomemlimit_bytes":                   "drawn only when set (the chart sets GOMEMLIMIT), and no process here has one",
}

// elsewhere says why expr cannot return data here, or "".
func elsewhere(expr string) string {
	for name, why := range notScraped {
		if strings.Contains(expr, name) {
			return name + ", " + why
		}
	}
	return ""
}

// checkDashboard evaluates every query of every panel of the dashboard at
// path and requires each to return at least one sample with a finite value,
// polling while the last scrapes come in; and each query variable's
// label_values query to return the values of wantVars.
func checkDashboard(t *testing.T, p *promServer, path string, wantVars map[string][]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	type query struct{ panel, legend, expr string }
	var queries []query
	for _, panel := range d.Panels {
		if panel.Type == "row" {
			continue
		}
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, q := range panel.Targets {
			if why := elsewhere(q.Expr); why != "" {
				p.query(grafanaVars(q.Expr)) // it must still be a query Prometheus runs
				t.Logf("no data required: %q (%s): %s", panel.Title, q.Legend, why)
				continue
			}
			queries = append(queries, query{panel.Title, q.Legend, grafanaVars(q.Expr)})
		}
	}
	pollProm(t, 20*time.Second, "every panel's queries return data", func() (bool, string) {
		var empty []string
		for _, q := range queries {
			finite := slices.ContainsFunc(p.query(q.expr), func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) })
			if !finite {
				empty = append(empty, fmt.Sprintf("%q (%s): %s", q.panel, q.legend, q.expr))
			}
		}
		return len(empty) == 0, "no data:\n\t" + strings.Join(empty, "\n\t")
	})
	labelValues := regexp.MustCompile(`^label_values\((.*), *(\w+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Query)
			continue
		}
		var got []string
		p.get("/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {grafanaVars(m[1])}}, &got)
		for _, w := range wantVars[v.Name] {
			if !slices.Contains(got, w) {
				t.Errorf("variable %s (%s): values %v, missing %s", v.Name, v.Query, got, w)
			}
		}
		delete(wantVars, v.Name)
	}
	for name := range wantVars {
		t.Errorf("the dashboard has no variable %s", name)
	}
	t.Logf("%d panel queries of %s returned data", len(queries), filepath.Base(path))
}
