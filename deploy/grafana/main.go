// Command grafana writes headcount.json, the Grafana dashboard of a
// headcount deployment, to standard output:
//
//	go run ./deploy/grafana > deploy/grafana/headcount.json
//
// The JSON is committed (the Helm chart ships it, operators import it) and
// a test fails when it differs from what this program writes, so the
// panels are edited here, never in the JSON. docs/OPERATIONS.md ("Reading
// the dashboard") says what each panel should show.
//
// The dashboard takes its Prometheus from a datasource variable rather than
// an __inputs entry, so it loads the same way imported by hand and
// provisioned from a file (Grafana substitutes __inputs only on import).
// Metrics come from the binaries' /metrics as documented in
// docs/REFERENCE.md; the node is the scrape's instance label, the
// namespace the label a Kubernetes scrape adds. Every selector matches the
// namespace with =~, whose "All" value .* also matches series that have no
// namespace label, so the dashboard works on a scrape outside Kubernetes.
// Two rows read other exporters (main_test.go's external lists each
// metric): Resources takes limits and restarts from kube-state-metrics,
// and Redis reads redis_exporter, its servers picked by the Redis
// variable rather than the namespace.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	b, err := render()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, _ = os.Stdout.Write(b)
}

// render returns the dashboard's JSON, as committed.
func render() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // PromQL's > and Grafana's & stay readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(dashboard()); err != nil {
		return nil, fmt.Errorf("encode the dashboard: %w", err)
	}
	return b.Bytes(), nil
}

// Selectors the queries share. $__rate_interval is Grafana's: at least
// four scrape intervals, so a rate always has two samples.
const (
	ns   = `namespace=~"$namespace"`
	node = ns + `, instance=~"$node"`
	app  = ns + `, app=~"$app"`
	win  = `[$__rate_interval]`
	// rds selects the Redis servers' redis_exporter series. Not by
	// namespace: an external Redis's exporter is often scraped elsewhere.
	rds = `instance=~"$redis"`
	// ours keeps the series of headcount's processes among the process_
	// and go_ series of every target in the namespace (redis_exporter
	// exports them too); headcount_apps_source_up is every binary's.
	ours = `and on (namespace, instance) headcount_apps_source_up{` + ns + `}`
	// podInstance maps a Kubernetes container to its headcount process's
	// instance, for kube-state-metrics' series, which have no instance of
	// their own to show (their scrape's is kube-state-metrics').
	podInstance = `group by (namespace, pod, container, instance) (headcount_apps_source_up{` + ns + `})`
)

// limit is each headcount container's limit of resource (cpu, memory)
// from kube-state-metrics, by its process's instance.
func limit(resource string) string {
	return `max by (instance) (kube_pod_container_resource_limits{` + ns + `, resource="` + resource + `"} * on (namespace, pod, container) group_left (instance) ` + podInstance + `)`
}

// datasource is how every panel and variable names its Prometheus.
var datasource = ref{Type: "prometheus", UID: "${datasource}"}

type ref struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// q is one query of a panel and its legend.
type q struct{ expr, legend string }

// spec is a panel as written below; layout and JSON come from build.
type spec struct {
	title, desc string
	kind        string // "timeseries" (the default) or "stat"
	unit        string // Grafana's unit id; "short" when empty
	w           int    // width of 24; 8 when 0
	bars        bool
	step        bool // stepped lines, for 0/1 states
	table       bool // a legend table sorted by each series' max
	// negative ends the legends of the series drawn below the axis.
	negative string
	// thresholds colour a stat: each value and the colour from it up,
	// the first from minus infinity.
	thresholds []threshold
	queries    []q
}

type threshold struct {
	color string
	from  *float64
}

func at(v float64) *float64 { return &v }

// rows are the dashboard's sections, top to bottom.
var rows = []struct {
	title  string
	panels []spec
}{
	{"Overview", []spec{
		{title: "wsnodes ready", kind: "stat", w: 3, desc: "wsnodes whose /readyz answers 200: as many as you run, outside a rollout.",
			queries: []q{{`sum(headcount_wsnode_ready{` + ns + `})`, "ready"}}},
		{title: "httpapis ready", kind: "stat", w: 3, desc: "httpapi replicas whose /readyz answers 200.",
			queries: []q{{`sum(headcount_httpapi_ready{` + ns + `})`, "ready"}}},
		{title: "Connections", kind: "stat", w: 3, desc: "WebSocket connections open on all wsnodes.",
			queries: []q{{`sum(headcount_wsnode_connections_open{` + ns + `})`, "connections"}}},
		{title: "Subscriptions", kind: "stat", w: 3, desc: "Channel subscriptions held by all wsnodes' sockets.",
			queries: []q{{`sum(headcount_wsnode_subscriptions{` + ns + `})`, "subscriptions"}}},
		{title: "Active cleaners", kind: "stat", w: 3, desc: "Cleaners holding the lease: 1 is healthy; 0 means nobody reaps dead nodes.",
			thresholds: []threshold{{"red", nil}, {"green", at(1)}, {"red", at(2)}},
			queries:    []q{{`sum(headcount_cleaner_active{` + ns + `})`, "active"}}},
		{title: "Since the last scan", kind: "stat", w: 3, unit: "s", desc: "Time since the active cleaner last finished a scan for dead nodes: about the scan interval when healthy.",
			thresholds: []threshold{{"green", nil}, {"orange", at(10)}, {"red", at(30)}},
			queries:    []q{{`time() - max(headcount_cleaner_last_scan_timestamp_seconds{` + ns + `})`, "age"}}},
		{title: "Count drift", kind: "stat", w: 3, desc: "The most count entries any app's last audit found differing from the nodes' contributions: anything but 0 is a bug to look at.",
			thresholds: []threshold{{"green", nil}, {"red", at(1)}},
			queries:    []q{{`max(headcount_cleaner_count_drift{` + app + `})`, "drift"}}},
		{title: "Webhook backlog", kind: "stat", w: 3, desc: "Webhook events read and not yet delivered or given up, over all apps and URLs.",
			thresholds: []threshold{{"green", nil}, {"orange", at(1000)}},
			queries:    []q{{`sum(headcount_webhook_queue_depth{` + app + `})`, "events"}}},
	}},
	{"WebSocket nodes", []spec{
		{title: "Connections per node", desc: "WebSocket connections established on each wsnode (after the Pusher handshake).",
			queries: []q{{`sum by (instance) (headcount_wsnode_connections_open{` + node + `})`, "{{instance}}"}}},
		{title: "Subscriptions per node", desc: "Channel subscriptions held by each wsnode's sockets.",
			queries: []q{{`sum by (instance) (headcount_wsnode_subscriptions{` + node + `})`, "{{instance}}"}}},
		{title: "Readiness", step: true, desc: "1 while a process's /readyz answers 200; 0 while it starts, drains, or cannot reach Redis or its apps.",
			queries: []q{
				{`min by (instance) (headcount_wsnode_ready{` + node + `})`, "wsnode {{instance}}"},
				{`min by (instance) (headcount_httpapi_ready{` + ns + `})`, "httpapi {{instance}}"},
			}},
		{title: "Connects and disconnects", unit: "ops", negative: "disconnects",
			desc: "Connections established per second (above the axis) and ended per second (below), each counted once by the node (headcount_wsnode_disconnects_total).",
			queries: []q{
				{`sum by (instance) (rate(headcount_wsnode_connections_total{` + node + `}` + win + `))`, "{{instance}} connects"},
				{`sum by (instance) (rate(headcount_wsnode_disconnects_total{` + node + `}` + win + `))`, "{{instance}} disconnects"},
			}},
		{title: "Delivery rate", unit: "ops", desc: "Frames written to sockets per second (replies and deliveries), and messages the event bus brought each node.",
			queries: []q{
				{`sum by (instance) (rate(headcount_wsnode_frames_sent_total{` + node + `}` + win + `))`, "{{instance}} frames to sockets"},
				{`sum by (instance) (rate(headcount_wsnode_messages_delivered_total{` + node + `}` + win + `))`, "{{instance}} messages from the bus"},
			}},
		{title: "Slow consumers", unit: "ops", desc: "Sockets cut per second because their send queue filled (close 4100) or a write stalled past its timeout.",
			queries: []q{
				{`sum by (instance) (rate(headcount_wsnode_slow_consumers_total{` + node + `}` + win + `))`, "{{instance}} queue full"},
				{`sum by (instance) (rate(headcount_wsnode_errors_total{` + node + `, reason="write_timeout"}` + win + `))`, "{{instance}} write timeout"},
			}},
		{title: "Socket cap used", unit: "percentunit", desc: "Sockets open on each wsnode's WebSocket port as a share of its --max-sockets; past the cap new connections get 503.",
			queries: []q{{`max by (instance) (headcount_wsnode_port_connections{` + node + `} / (headcount_wsnode_max_sockets{` + node + `} > 0))`, "{{instance}}"}}},
		{title: "Refusals and connection errors by reason", unit: "ops", w: 16, table: true,
			desc:    "headcount_wsnode_errors_total by reason, all wsnodes: refused upgrades (socket_cap, origin_not_allowed, app_not_found), protocol errors and cut connections.",
			queries: []q{{`sum by (reason) (rate(headcount_wsnode_errors_total{` + node + `}` + win + `))`, "{{reason}}"}}},
		{title: "Disconnects by close code", unit: "ops", w: 24, table: true,
			desc:    "headcount_wsnode_disconnects_total by close code, all wsnodes: the close frame the node sent or answered (1000 and 1001 clients leaving, 4200 a drain, 4201 no pong, 4100 slow or flooding clients, 4001 and 4003 unknown or disabled apps, 1007 and 1009 bad frames), 1006 a connection that ended without one (a network drop, a killed client), other a code a client chose.",
			queries: []q{{`sum by (code) (rate(headcount_wsnode_disconnects_total{` + node + `}` + win + `))`, "{{code}}"}}},
	}},
	{"Resources", []spec{
		{title: "CPU against the limit", desc: "CPU cores each headcount process uses (process_cpu_seconds_total, from the process) and its container's CPU limit (kube_pod_container_resource_limits, from kube-state-metrics: no line without a limit or outside Kubernetes).",
			queries: []q{
				{`sum by (instance) (rate(process_cpu_seconds_total{` + ns + `}` + win + `) ` + ours + `)`, "{{instance}}"},
				{limit("cpu"), "{{instance}} limit"},
			}},
		{title: "Memory against the limit", unit: "bytes", desc: "Resident memory of each headcount process (process_resident_memory_bytes, from the process) and its container's memory limit (kube_pod_container_resource_limits, from kube-state-metrics), past which the kernel kills it.",
			queries: []q{
				{`max by (instance) (process_resident_memory_bytes{` + ns + `} ` + ours + `)`, "{{instance}}"},
				{limit("memory"), "{{instance}} limit"},
			}},
		{title: "Go heap", unit: "bytes", desc: "Each process's Go heap in use, the heap size at which the next GC runs, and GOMEMLIMIT (the chart sets it below the memory limit), from the Go collector.",
			queries: []q{
				{`max by (instance) (go_memstats_heap_inuse_bytes{` + ns + `} ` + ours + `)`, "{{instance}} in use"},
				{`max by (instance) (go_memstats_next_gc_bytes{` + ns + `} ` + ours + `)`, "{{instance}} next GC"},
				{`max by (instance) ((go_gc_gomemlimit_bytes{` + ns + `} < 2^62) ` + ours + `)`, "{{instance}} GOMEMLIMIT"},
			}},
		{title: "GC pauses", unit: "s", desc: "The longest recent stop-the-world GC pause of each process (go_gc_duration_seconds), and the pause time per second of wall time.",
			queries: []q{
				{`max by (instance) (go_gc_duration_seconds{` + ns + `, quantile="1"} ` + ours + `)`, "{{instance}} longest pause"},
				{`sum by (instance) (rate(go_gc_duration_seconds_sum{` + ns + `}` + win + `) ` + ours + `)`, "{{instance}} paused per second"},
			}},
		{title: "Goroutines and file descriptors", desc: "Goroutines of each process (go_goroutines; on the event loop an idle socket holds none), and its open file descriptors as a share of its limit (process_open_fds / process_max_fds: a wsnode's sockets are descriptors).",
			queries: []q{
				{`max by (instance) (go_goroutines{` + ns + `} ` + ours + `)`, "{{instance}} goroutines"},
				{`max by (instance) ((process_open_fds{` + ns + `} / process_max_fds{` + ns + `}) ` + ours + `)`, "{{instance}} fds used (share)"},
			}},
		{title: "Restarts", bars: true, desc: "Container restarts in the last hour (kube_pod_container_status_restarts_total, from kube-state-metrics, which also counts a crash loop that never got scraped), and process starts seen in the scrapes (process_start_time_seconds changing), which works outside Kubernetes too.",
			queries: []q{
				{`max by (instance) (increase(kube_pod_container_status_restarts_total{` + ns + `}[1h]) * on (namespace, pod, container) group_left (instance) ` + podInstance + `)`, "{{instance}} container restarts"},
				{`max by (instance) (changes(process_start_time_seconds{` + ns + `}[1h]) ` + ours + `)`, "{{instance}} process starts"},
			}},
	}},
	{"Redis", []spec{
		{title: "Redis memory", unit: "bytes", desc: "Memory Redis uses against its maxmemory (redis_exporter): at maxmemory it refuses writes (noeviction) and counts fail (HeadcountRedisMemoryHigh).",
			queries: []q{
				{`max by (instance) (redis_memory_used_bytes{` + rds + `})`, "{{instance}} used"},
				{`max by (instance) (redis_memory_max_bytes{` + rds + `} > 0)`, "{{instance}} maxmemory"},
			}},
		{title: "Redis commands", unit: "ops", desc: "Commands Redis processed per second (redis_exporter): count flushes, heartbeats, events, reads.",
			queries: []q{{`sum by (instance) (rate(redis_commands_processed_total{` + rds + `}` + win + `))`, "{{instance}}"}}},
		{title: "Redis command latency", unit: "s", desc: "Mean time Redis spent in each command (redis_exporter's commands_duration over calls), the ten slowest: evalsha is the count scripts.",
			queries: []q{{`topk(10, sum by (instance, cmd) (rate(redis_commands_duration_seconds_total{` + rds + `}` + win + `)) / (sum by (instance, cmd) (rate(redis_commands_total{` + rds + `}` + win + `)) > 0))`, "{{instance}} {{cmd}}"}}},
		{title: "Redis clients", desc: "Client connections to Redis (redis_exporter): each headcount process holds a few; a climb without more processes is a leak or a reconnect storm.",
			queries: []q{
				{`max by (instance) (redis_connected_clients{` + rds + `})`, "{{instance}} connected"},
				{`max by (instance) (redis_blocked_clients{` + rds + `})`, "{{instance}} blocked"},
			}},
		{title: "Evicted and expired keys", unit: "ops", desc: "Keys Redis evicted per second, 0 under noeviction (an evicted count key makes a count wrong), and keys that expired (caches, tickets, snapshots: normal).",
			queries: []q{
				{`sum by (instance) (rate(redis_evicted_keys_total{` + rds + `}` + win + `))`, "{{instance}} evicted"},
				{`sum by (instance) (rate(redis_expired_keys_total{` + rds + `}` + win + `))`, "{{instance}} expired"},
			}},
		{title: "Replication and cluster", step: true, desc: "Replicas connected to each primary; on a replica, 1 while its link to the primary is up; on a Redis Cluster node, 1 while the cluster state is ok (redis_exporter).",
			queries: []q{
				{`max by (instance) (redis_connected_slaves{` + rds + `})`, "{{instance}} replicas"},
				{`min by (instance) (redis_master_link_up{` + rds + `})`, "{{instance}} link to primary"},
				{`min by (instance) (redis_cluster_state{` + rds + `})`, "{{instance}} cluster ok"},
			}},
	}},
	{"Counts and Redis", []spec{
		{title: "Count flush latency", unit: "s", desc: "Time one flush of count changes and heartbeat to Redis takes: p99 per node, p50 over all.",
			queries: []q{
				{`histogram_quantile(0.99, sum by (instance, le) (rate(headcount_counts_flush_seconds_bucket{` + node + `}` + win + `)))`, "{{instance}} p99"},
				{`histogram_quantile(0.5, sum by (le) (rate(headcount_counts_flush_seconds_bucket{` + node + `}` + win + `)))`, "all p50"},
			}},
		{title: "Count flushes and republishes", unit: "ops", desc: "Flushes per second by result, and full republications of a node's contribution by reason (missing: it was reaped while alive or Redis lost data).",
			queries: []q{
				{`sum by (result) (rate(headcount_counts_flushes_total{` + node + `}` + win + `))`, "flushes {{result}}"},
				{`sum by (reason) (rate(headcount_counts_resyncs_total{` + node + `}` + win + `))`, "republish {{reason}}"},
			}},
		{title: "Redis errors per binary", unit: "ops", desc: "Redis calls that failed, per second, by binary: 0 when Redis is healthy.",
			queries: []q{
				// An error series exists once an error happened; "or" the
				// flushes times 0 draws a 0 until then, and nothing if the
				// wsnodes are not scraped at all.
				{`sum(rate(headcount_counts_flushes_total{` + ns + `, result="error"}` + win + `)) or 0 * sum(rate(headcount_counts_flushes_total{` + ns + `}` + win + `))`, "wsnode: count flushes"},
				{`sum(rate(headcount_wsnode_errors_total{` + ns + `, reason="redis"}` + win + `))`, "wsnode: admission, cache, watchlist"},
				{`sum(rate(headcount_cleaner_scans_total{` + ns + `, result="error"}` + win + `)) or 0 * sum(rate(headcount_cleaner_scans_total{` + ns + `}` + win + `))`, "cleaner: scans"},
				{`sum(rate(headcount_httpapi_redis_errors_total{` + ns + `}` + win + `))`, "httpapi: reads and pings"},
				{`sum(rate(headcount_fanout_publish_errors_total{` + ns + `}` + win + `))`, "any: event bus publishes"},
			}},
	}},
	{"Cleaner", []spec{
		{title: "Cleaner lease holder", step: true, desc: "1 for the cleaner that holds the lease and scans; the others are passive (0).",
			queries: []q{{`max by (instance) (headcount_cleaner_active{` + ns + `})`, "{{instance}}"}}},
		{title: "Lease changes", desc: "Times a cleaner became the lease holder in the last 15 minutes: a takeover after a cleaner died is 1.",
			queries: []q{{`sum(increase(headcount_cleaner_lease_changes_total{` + ns + `, to="active"}[15m]))`, "holder changes / 15m"}}},
		{title: "Live wsnodes per app", desc: "Registered wsnodes seen within dead-after at the last scan, per app, as the active cleaner saw them.",
			queries: []q{{`max by (app) (headcount_cleaner_nodes_alive{` + app + `})`, "{{app}}"}}},
		{title: "Reaps by reason", bars: true, desc: "Dead wsnodes reaped, by reason: watch_ended (the cleaner's watch of its admin port ended and its Redis connection had closed: a crash), connection_closed (its Redis connection closed: a crash, unwatched) or heartbeat_stale (silent past dead-after: hung or cut off).",
			queries: []q{{`sum by (reason) (increase(headcount_cleaner_reaped_nodes_total{` + app + `}` + win + `))`, "{{reason}}"}}},
		{title: "Reap latency", unit: "s", desc: "From a reaped node's last heartbeat to its reaping (p99): the liveness grace for a crash, dead-after for a hung node.",
			queries: []q{{`histogram_quantile(0.99, sum by (le) (rate(headcount_cleaner_reap_latency_seconds_bucket{` + ns + `}` + win + `)))`, "p99"}}},
		{title: "Watch end to exact counts", unit: "s", desc: "From the end of the active cleaner's watch of a killed wsnode to the moment reads leave its counts out (p50, p99): milliseconds when healthy. The kernel ends the watch within milliseconds of the kill.",
			queries: []q{
				{`histogram_quantile(0.5, sum by (le) (rate(headcount_cleaner_watch_reap_seconds_bucket{` + ns + `}` + win + `)))`, "p50"},
				{`histogram_quantile(0.99, sum by (le) (rate(headcount_cleaner_watch_reap_seconds_bucket{` + ns + `}` + win + `)))`, "p99"},
			}},
		{title: "Audit drift per app", desc: "Count entries differing from the sum of the nodes' contributions at each app's last audit: 0 is healthy.",
			queries: []q{{`max by (app) (headcount_cleaner_count_drift{` + app + `})`, "{{app}}"}}},
	}},
	{"Webhooks", []spec{
		{title: "Webhook backlog", desc: "Events read from each app's log and not yet delivered or given up, per webhook URL (wh-... names the URL's hash).",
			queries: []q{{`sum by (app, webhook) (headcount_webhook_queue_depth{` + app + `})`, "{{app}} {{webhook}}"}}},
		{title: "Webhook backlog age", unit: "s", desc: "How old the oldest event read and not yet delivered or given up is, per webhook URL: within the 3 s debounce (and a batch's wait) when healthy; events are given up at 5 minutes.",
			queries: []q{{`max by (app, webhook) ((time() - headcount_webhook_oldest_pending_timestamp_seconds{` + app + `}) * (headcount_webhook_oldest_pending_timestamp_seconds{` + app + `} > bool 0))`, "{{app}} {{webhook}}"}}},
		{title: "Webhook deliveries, failures and give-ups", unit: "ops",
			desc: "Events delivered per second, failed requests (each retried with backoff for 5 minutes), events given up (expired after the retry window, or unreadable), and events the log refused at its byte budget.",
			queries: []q{
				{`sum by (app) (rate(headcount_webhook_sent_total{` + app + `}` + win + `))`, "{{app}} sent"},
				{`sum by (app) (rate(headcount_webhook_failed_total{` + app + `}` + win + `))`, "{{app}} failed"},
				{`sum by (app, reason) (rate(headcount_webhook_dropped_total{` + app + `}` + win + `))`, "{{app}} given up ({{reason}})"},
				{`max by (app) (rate(headcount_webhook_log_dropped_total{` + app + `}` + win + `))`, "{{app}} refused by the log"},
			}},
		{title: "Webhook delivery latency", unit: "s", w: 12, desc: "From an event's creation to its delivery (p99), debounce and retries included: channel_vacated and member_removed wait 3 s on purpose.",
			queries: []q{{`histogram_quantile(0.99, sum by (app, le) (rate(headcount_webhook_delivery_seconds_bucket{` + app + `}` + win + `)))`, "{{app}}"}}},
		{title: "Webhook event log size", unit: "bytes", w: 12, desc: "Bytes each app's event log holds against its byte budget (maxWebhookLogSizeInMb, 64 MiB by default).",
			queries: []q{{`max by (app) (headcount_webhook_log_bytes{` + app + `})`, "{{app}}"}}},
	}},
	{"Admission and rate limits", []spec{
		{title: "Admission waiting", desc: "Users on the waiting lists of each app's capped channels.",
			queries: []q{{`max by (app) (headcount_admission_waiting{` + app + `})`, "{{app}}"}}},
		{title: "Admission admitted", unit: "ops", desc: "Users given a slot per second: direct (room and nobody waiting) or promoted from the head of a list; and waiters struck for not checking in.",
			queries: []q{
				{`sum by (app, how) (rate(headcount_admission_admitted_total{` + app + `}` + win + `))`, "{{app}} {{how}}"},
				{`sum by (app) (rate(headcount_admission_dropouts_total{` + app + `}` + win + `))`, "{{app}} dropouts"},
			}},
		{title: "Rate-limit refusals", unit: "ops", desc: "Requests and client events refused for going over the app's per-second limits, by kind (client_events: 4301; backend_events, read_requests: 429).",
			queries: []q{{`sum by (app, kind) (rate(headcount_ratelimit_rejected_total{` + app + `}` + win + `))`, "{{app}} {{kind}}"}}},
	}},
	{"HTTP API", []spec{
		{title: "HTTP API latency by route", unit: "s", w: 12, desc: "p99 of the HTTP API's request time per route.",
			queries: []q{{`histogram_quantile(0.99, sum by (route, le) (rate(headcount_httpapi_request_duration_seconds_bucket{` + ns + `}` + win + `)))`, "{{route}}"}}},
		{title: "HTTP API requests by code", unit: "reqps", w: 12, desc: "Requests per second by status code: 429 is a rate limit, 5xx a failure (Redis, most likely).",
			queries: []q{{`sum by (code) (rate(headcount_httpapi_requests_total{` + ns + `}` + win + `))`, "{{code}}"}}},
	}},
}

// Variables' queries. The app is taken from every headcount series that
// has one, so an app shows up whichever of its features is in use.
const (
	namespaceQuery = `label_values(headcount_wsnode_connections_open, namespace)`
	appQuery       = `label_values({__name__=~"headcount_.+", app!="", ` + ns + `}, app)`
	nodeQuery      = `label_values(headcount_wsnode_connections_open{` + ns + `}, instance)`
	// Every Redis a redis_exporter reports on, in any namespace.
	redisQuery = `label_values(redis_up, instance)`
)

// Layout: panels 8 high, rows of 24 wide.
const panelHeight = 8

func dashboard() map[string]any {
	var panels []map[string]any
	id, y := 0, 0
	for _, r := range rows {
		id++
		panels = append(panels, map[string]any{
			"id": id, "type": "row", "title": r.title, "collapsed": false, "panels": []any{},
			"gridPos": grid(0, y, 24, 1),
		})
		y++
		x, h := 0, panelHeight
		for _, s := range r.panels {
			w := s.w
			if w == 0 {
				w = 8
			}
			if s.kind == "stat" {
				h = 4
			}
			if x+w > 24 {
				x, y = 0, y+h
			}
			id++
			panels = append(panels, panel(id, grid(x, y, w, h), s))
			x += w
		}
		y += h
	}
	return map[string]any{
		"annotations": map[string]any{"list": []any{map[string]any{
			"builtIn": 1, "datasource": map[string]string{"type": "grafana", "uid": "-- Grafana --"},
			"enable": true, "hide": true, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
		}}},
		"description":          "headcount: WebSocket nodes, counts, the cleaner, webhooks, admission, the HTTP API, the processes' resources and Redis. Panels: docs/OPERATIONS.md, Reading the dashboard.",
		"editable":             true,
		"fiscalYearStartMonth": 0,
		"graphTooltip":         1,
		"id":                   nil,
		"links":                []any{},
		"panels":               panels,
		"refresh":              "30s",
		"schemaVersion":        39,
		"tags":                 []string{"headcount"},
		"templating": map[string]any{"list": []any{
			map[string]any{
				"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
				"current": map[string]any{}, "hide": 0, "includeAll": false, "multi": false, "options": []any{}, "refresh": 1, "regex": "",
			},
			variable("namespace", "Namespace", namespaceQuery),
			variable("app", "App", appQuery),
			variable("node", "Node", nodeQuery),
			variable("redis", "Redis", redisQuery),
		}},
		"time":       map[string]string{"from": "now-1h", "to": "now"},
		"timepicker": map[string]any{},
		"timezone":   "",
		"title":      "headcount",
		"uid":        "headcount",
		"version":    1,
	}
}

// variable is a multi-valued query variable whose "All" is .*, so a
// selector with =~ also matches series without the label.
func variable(name, label, query string) map[string]any {
	return map[string]any{
		"name": name, "label": label, "type": "query", "datasource": datasource,
		// The query as a string, the form every Grafana version reads
		// (newer ones turn it into their editor's object).
		"definition": query, "query": query,
		"includeAll": true, "allValue": ".*", "multi": true,
		"current": map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}},
		"hide":    0, "options": []any{}, "refresh": 2, "regex": "", "skipUrlSync": false, "sort": 1,
	}
}

func grid(x, y, w, h int) map[string]int { return map[string]int{"h": h, "w": w, "x": x, "y": y} }

func panel(id int, pos map[string]int, s spec) map[string]any {
	unit := s.unit
	if unit == "" {
		unit = "short"
	}
	targets := make([]map[string]any, len(s.queries))
	for i, t := range s.queries {
		targets[i] = map[string]any{
			"datasource": datasource, "expr": t.expr, "legendFormat": t.legend,
			"refId": string(rune('A' + i)), "range": true, "instant": false,
		}
	}
	p := map[string]any{
		"id": id, "type": "timeseries", "title": s.title, "description": s.desc,
		"datasource": datasource, "gridPos": pos, "targets": targets,
	}
	if s.kind == "stat" {
		steps := make([]map[string]any, len(s.thresholds))
		for i, t := range s.thresholds {
			steps[i] = map[string]any{"color": t.color, "value": t.from}
		}
		if len(steps) == 0 {
			steps = []map[string]any{{"color": "blue", "value": nil}}
		}
		p["type"] = "stat"
		p["fieldConfig"] = map[string]any{
			"defaults": map[string]any{
				"unit": unit, "color": map[string]string{"mode": "thresholds"},
				"thresholds": map[string]any{"mode": "absolute", "steps": steps},
			},
			"overrides": []any{},
		}
		p["options"] = map[string]any{
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
			"colorMode":     "background", "graphMode": "area", "justifyMode": "auto", "orientation": "auto",
			"textMode": "value", "wideLayout": true, "showPercentChange": false,
		}
		return p
	}
	custom := map[string]any{
		"drawStyle": "line", "lineInterpolation": "linear", "lineWidth": 1, "fillOpacity": 10,
		"showPoints": "never", "spanNulls": false, "axisSoftMin": 0,
		"stacking": map[string]string{"mode": "none", "group": "A"},
	}
	if s.step {
		custom["lineInterpolation"] = "stepAfter"
	}
	if s.bars {
		custom["drawStyle"], custom["fillOpacity"] = "bars", 80
	}
	overrides := []any{}
	if s.negative != "" {
		delete(custom, "axisSoftMin")
		overrides = append(overrides, map[string]any{
			"matcher":    map[string]string{"id": "byRegexp", "options": ".*" + s.negative + "$"},
			"properties": []any{map[string]string{"id": "custom.transform", "value": "negative-Y"}},
		})
	}
	p["fieldConfig"] = map[string]any{
		"defaults":  map[string]any{"unit": unit, "custom": custom, "color": map[string]string{"mode": "palette-classic"}},
		"overrides": overrides,
	}
	legend := map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true, "calcs": []string{}}
	if s.table {
		legend = map[string]any{"displayMode": "table", "placement": "right", "showLegend": true, "calcs": []string{"max"},
			"sortBy": "Max", "sortDesc": true}
	}
	p["options"] = map[string]any{"legend": legend, "tooltip": map[string]string{"mode": "multi", "sort": "desc"}}
	return p
}
