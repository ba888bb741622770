{{- /*
headcount.alertRules: headcount's alerting rules, a Prometheus rule file.
prometheusrule.yaml serves them, leaving out the alerts turned off and
setting each one's `for` and severity from prometheusRule.alerts;
thresholds come from there too (the numbers in the comments below are
the defaults, which assume docs/REFERENCE.md's defaults and a scrape
interval of 15 to 30 s). deploy/prometheus/alerts.yaml is this rendered with the
defaults and scope all, tested with promtool; deploy/k8s/validate keeps
the two equal (TestAlertsFileIsChartRender, which also rewrites it).

Severities are critical (someone acts now: clients are not served, or
dead nodes stay counted) and warning (someone looks within working
hours), the names kube-prometheus-stack routes by; prometheusRule.severities
maps them for other routes. Rules about one process keep its target
labels (namespace, pod, instance); rules about a whole deployment
aggregate by namespace, so several deployments in one Prometheus each get
their own alert. Summaries are static; descriptions name the pod (the
instance outside Kubernetes).

Scope release (the default) matches the release's namespace and, with
the chart's ServiceMonitor, its job (the Service's name), so each
release alerts on its own pods only. Scope all matches every namespace.

A namespace whose targets are all gone exports nothing to compare with,
so the "none is scraped" checks ask kube-state-metrics (part of
kube-prometheus-stack) which namespaces run headcount: those where the
release's Deployments <fullname>-wsnode, -cleaner and -httpapi all want
pods (in scope all, any release's, or deploy/k8s's bare names; the three
together, so another application's Deployment named httpapi does not
count). Where kube-state-metrics knows no such Deployment (outside
Kubernetes), absent() is the check.

Prometheus's own templates pass through helm as raw strings: {{`{{ $value }}`}}.
*/ -}}
{{- define "headcount.alertRules" -}}
{{- $v := .Values.prometheusRule }}
{{- $a := $v.alerts }}
{{- $ns := "" }}
{{- $hcM := list }}
{{- if eq $v.scope "release" }}
{{- $ns = printf "namespace=%q" .Release.Namespace }}
{{- $hcM = append $hcM $ns }}
{{- /* The Operator names a ServiceMonitor's job after the Service it
scrapes; without the chart's, whoever scrapes names the job. */}}
{{- if .Values.serviceMonitor.enabled }}
{{- $hcM = append $hcM (printf "job=%q" (include "headcount.objname" (dict "root" . "name" "metrics"))) }}
{{- end }}
{{- end }}
{{- /* The Deployments' names: the release's, or, in scope all, any
release's (<fullname>-wsnode) and the bare names of deploy/k8s. */}}
{{- $deploy := dict }}
{{- range $b := list "wsnode" "cleaner" "httpapi" }}
{{- if eq $v.scope "release" }}
{{- $_ := set $deploy $b (printf "deployment=%q" (include "headcount.objname" (dict "root" $ "name" $b))) }}
{{- else }}
{{- $_ := set $deploy $b (printf "deployment=~\"(.+-)?%s\"" $b) }}
{{- end }}
{{- end }}
{{- $trio := printf "deployment=~\"(.+-)?(wsnode|cleaner|httpapi)\"" }}
{{- if eq $v.scope "release" }}
{{- $trio = printf "deployment=~%q" (printf "%s|%s|%s" (include "headcount.objname" (dict "root" . "name" "wsnode")) (include "headcount.objname" (dict "root" . "name" "cleaner")) (include "headcount.objname" (dict "root" . "name" "httpapi"))) }}
{{- end }}
{{- /* Matchers of headcount's series, of kube-state-metrics' and cAdvisor's
(their own job), and of redis_exporter's: alone ({...}) or after others. */}}
{{- $hc := "" }}
{{- $hcAnd := "" }}
{{- with $hcM }}
{{- $hc = printf "{%s}" (join ", " .) }}
{{- $hcAnd = printf ", %s" (join ", " .) }}
{{- end }}
{{- $kAnd := "" }}
{{- with $ns }}
{{- $kAnd = printf ", %s" . }}
{{- end }}
{{- /* By default the release's namespace; with the chart's Redis
exporter and ServiceMonitor, that Redis's job too (its Service's name). */}}
{{- $redisDefault := $ns }}
{{- if and $ns (eq .Values.redis.mode "single") .Values.redis.single.exporter.enabled .Values.serviceMonitor.enabled }}
{{- $redisDefault = printf "%s, job=%q" $ns (include "headcount.objname" (dict "root" . "name" "redis")) }}
{{- end }}
{{- $redis := $v.redisSelector | default $redisDefault }}
{{- with $redis }}
{{- $redis = printf "{%s}" . }}
{{- end }}
{{- $pod := `{{ or $labels.pod $labels.instance }}` }}
{{- $inNs := `{{ with $labels.namespace }} in {{ . }}{{ end }}` }}
groups:
  - name: headcount-counts
    rules:
      # The active cleaner audits one app every 5 s (apps take turns) and
      # exports the differences it found; the audit is atomic, so any value
      # above 0 is real drift, never a write caught half-way, and nothing
      # repairs it by itself. 10m: the same app audited again (with up to
      # 120 apps) before anyone is asked to look.
      - alert: HeadcountCountDrift
        expr: max by (namespace, app) (headcount_cleaner_count_drift{{ $hc }}) > 0
        annotations:
          summary: Channel counts of an app differ from the wsnodes' contributions
          description: >-
            The active cleaner's audit of app {{`{{ $labels.app }}`}}{{ $inNs }} found
            {{`{{ $value }}`}} count entries that differ from the sum of the registered wsnodes'
            contributions, for {{ $a.HeadcountCountDrift.for }}. Channel counts, presence members or
            connection counts of this app are wrong until repaired.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountcountdrift

      # A flush carries the node's heartbeat: at --heartbeat 1s and
      # --dead-after 3s a node has 2 s of slack before the cleaner may reap
      # it alive. A p99 above 0.5 s for 10m eats a quarter of that slack:
      # Redis is slow (CPU, a slow command, a failover), and heartbeat reaps
      # of live nodes come next.
      - alert: HeadcountCountFlushesSlow
        expr: histogram_quantile(0.99, rate(headcount_counts_flush_seconds_bucket{{ $hc }}[5m])) > {{ $a.HeadcountCountFlushesSlow.threshold }}
        annotations:
          summary: A wsnode's count flushes to Redis are slow
          description: >-
            The 99th percentile of count flushes of wsnode {{ $pod }} has been
            {{`{{ $value | humanizeDuration }}`}} (over {{ $a.HeadcountCountFlushesSlow.threshold }}
            s) for {{ $a.HeadcountCountFlushesSlow.for }}. Flushes carry the node's heartbeat; once
            one takes longer than --dead-after less --heartbeat, the cleaner reaps the node while it
            is alive.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountcountflushesslow

  - name: headcount-cleaner
    rules:
      # Without an active cleaner nothing reaps a dead wsnode: its sockets
      # stay counted (and its presence members listed) until one is back.
      # The standby takes the lease within --lease-ttl (3 s), and a cleaner
      # waits for its apps before contending, so 2m is no hand-over. The
      # second and third branches: no cleaner scraped at all (see the top
      # of this file).
      - alert: HeadcountNoActiveCleaner
        expr: |-
          sum by (namespace) (headcount_cleaner_active{{ $hc }}) == 0
          or (
            count by (namespace) (kube_deployment_spec_replicas{ {{- $trio }}{{ $kAnd }}} > 0) >= 3
            unless on (namespace) count by (namespace) (headcount_cleaner_active{{ $hc }})
          )
          or (absent(headcount_cleaner_active{{ $hc }}) unless on () kube_deployment_spec_replicas{ {{- get $deploy "cleaner" }}{{ $kAnd }}})
        annotations:
          summary: No cleaner holds the lease
          description: >-
            No cleaner{{ $inNs }} has been active for {{ $a.HeadcountNoActiveCleaner.for }}, or none
            is scraped. wsnodes that die are not reaped: their sockets stay in the counts and their
            presence members in the member lists, and the counts are not audited.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountnoactivecleaner

      # An active cleaner scans every 500ms; a last successful scan older
      # than 30 s means its scans fail (Redis) or hang, and dead nodes are
      # not reaped although the lease is held. lastRun is 0 until the first
      # scan, which runs at once on becoming active: 1m covers it.
      - alert: HeadcountCleanerNotScanning
        expr: headcount_cleaner_active{{ $hc }} == 1 and (time() - headcount_cleaner_last_scan_timestamp_seconds{{ $hc }}) > {{ $a.HeadcountCleanerNotScanning.threshold }}
        annotations:
          summary: The active cleaner does not finish its scans for dead wsnodes
          description: >-
            Cleaner {{ $pod }} holds the lease but its last successful scan for dead wsnodes
            finished more than {{ $a.HeadcountCleanerNotScanning.threshold }} seconds ago, for
            {{ $a.HeadcountCleanerNotScanning.for }}. Dead wsnodes are not reaped.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountcleanernotscanning

      # A rolling upgrade of the two cleaners moves the lease at most twice
      # (each time the active one stops). Five changes in 15m is more than
      # two upgrades back to back: renewals are failing (Redis slow or
      # failing over, a cleaner starved of CPU), and each hand-over pauses
      # reaping for up to a lease TTL.
      - alert: HeadcountCleanerLeaseFlapping
        expr: sum by (namespace) (increase(headcount_cleaner_lease_changes_total{to="active"{{ $hcAnd }}}[15m])) >= {{ $a.HeadcountCleanerLeaseFlapping.threshold }}
        annotations:
          summary: The cleaner lease keeps changing hands
          description: >-
            Cleaners became the lease holder {{`{{ $value | humanize }}`}} times in the last 15
            minutes{{ $inNs }} ({{ $a.HeadcountCleanerLeaseFlapping.threshold }} or more). Each
            hand-over leaves dead wsnodes unreaped for up to a lease TTL; a lease that keeps moving
            means renewals fail.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountcleanerleaseflapping

      # heartbeat_stale reaps a node whose process still held its Redis
      # connection but stopped writing for --dead-after: hung (a stall, a
      # deadlock, CPU starvation) or cut off (a partition, a lost host). A
      # killed process is reaped as watch_ended or connection_closed instead. Any such reap
      # is worth a look; the 15m window keeps the alert up long enough to
      # be seen. Counted once per app the node had sockets in.
      - alert: HeadcountNodeReapedByHeartbeat
        expr: sum by (namespace) (increase(headcount_cleaner_reaped_nodes_total{reason="heartbeat_stale"{{ $hcAnd }}}[15m])) > 0
        annotations:
          summary: A wsnode was reaped for a stale heartbeat (hung or cut off)
          description: >-
            The cleaner reaped {{`{{ $value | humanize }}`}} wsnode contributions (one per app) in
            the last 15 minutes{{ $inNs }} because their heartbeat was older than --dead-after while
            their Redis connection stayed open: a hung or partitioned wsnode, not a crash.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountnodereapedbyheartbeat

  - name: headcount-serving
    rules:
      # A draining wsnode is not ready for its drain window (30 s in
      # deploy/k8s) and then exits; starting takes seconds. 5m not ready is
      # neither: Redis or the event fan-out is out of reach, or the apps
      # never loaded. Its clients are served by the other nodes.
      - alert: HeadcountWsnodeNotReady
        expr: headcount_wsnode_ready{{ $hc }} == 0
        annotations:
          summary: A wsnode is not ready
          description: >-
            wsnode {{ $pod }} has answered /readyz with 503 for
            {{ $a.HeadcountWsnodeNotReady.for }}: its counts or its pub/sub do not reach Redis, or
            its apps never loaded. It takes no new sockets.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountwsnodenotready

      # No wsnode ready is an outage: no client can connect. 2m rides out a
      # Redis failover (tens of seconds). The second and third branches: no
      # wsnode scraped at all (see the top of this file). They ask for a
      # metric every version exports, so a rollout from one without
      # headcount_wsnode_ready does not page.
      - alert: HeadcountNoWsnodeReady
        expr: |-
          max by (namespace) (headcount_wsnode_ready{{ $hc }}) == 0
          or (
            count by (namespace) (kube_deployment_spec_replicas{ {{- $trio }}{{ $kAnd }}} > 0) >= 3
            unless on (namespace) count by (namespace) (headcount_wsnode_connections_open{{ $hc }})
          )
          or (absent(headcount_wsnode_connections_open{{ $hc }}) unless on () kube_deployment_spec_replicas{ {{- get $deploy "wsnode" }}{{ $kAnd }}})
        annotations:
          summary: No wsnode is ready
          description: >-
            No wsnode{{ $inNs }} has answered /readyz with 200 for
            {{ $a.HeadcountNoWsnodeReady.for }}, or none is scraped: clients cannot connect.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountnowsnodeready

      # Sockets falling to less than half of the namespace's most in the
      # last 30m while every wsnode is ready: the nodes are fine, so clients
      # cannot reach them (an ingress, a load balancer, DNS, an expired
      # certificate). A drain or a node restart moves sockets, it does not
      # lose them: they reconnect to the other nodes within seconds. Under
      # 100 sockets a quiet hour looks the same, so it is left out.
      - alert: HeadcountSocketsCollapsed
        expr: |-
          sum by (namespace) (headcount_wsnode_connections_open{{ $hc }})
            < {{ $a.HeadcountSocketsCollapsed.threshold }} * max_over_time(sum by (namespace) (headcount_wsnode_connections_open{{ $hc }})[{{ $a.HeadcountSocketsCollapsed.window }}:1m])
          and on (namespace) max_over_time(sum by (namespace) (headcount_wsnode_connections_open{{ $hc }})[{{ $a.HeadcountSocketsCollapsed.window }}:1m]) >= {{ $a.HeadcountSocketsCollapsed.minSockets }}
          and on (namespace) min by (namespace) (headcount_wsnode_ready{{ $hc }}) == 1
        annotations:
          summary: Clients stopped reaching wsnodes that are ready
          description: >-
            The wsnodes{{ $inNs }} hold {{`{{ $value }}`}} sockets, less than
            {{ $a.HeadcountSocketsCollapsed.threshold }} of their most in the last
            {{ $a.HeadcountSocketsCollapsed.window }}, for {{ $a.HeadcountSocketsCollapsed.for }},
            while every wsnode is ready: clients cannot reach them (ingress, load balancer, DNS or
            certificate).
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountsocketscollapsed

      # As for wsnode: a draining httpapi is not ready for seconds.
      - alert: HeadcountHTTPAPINotReady
        expr: headcount_httpapi_ready{{ $hc }} == 0
        annotations:
          summary: An httpapi is not ready
          description: >-
            httpapi {{ $pod }} has answered /readyz with 503 for
            {{ $a.HeadcountHTTPAPINotReady.for }}: its Redis ping fails, or its apps never loaded.
            It takes no API requests.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcounthttpapinotready

      # No httpapi ready: backends cannot publish or read, and no webhook is
      # delivered. None scraped as for wsnodes.
      - alert: HeadcountNoHTTPAPIReady
        expr: |-
          max by (namespace) (headcount_httpapi_ready{{ $hc }}) == 0
          or (
            count by (namespace) (kube_deployment_spec_replicas{ {{- $trio }}{{ $kAnd }}} > 0) >= 3
            unless on (namespace) count by (namespace) (headcount_httpapi_redis_up{{ $hc }})
          )
          or (absent(headcount_httpapi_redis_up{{ $hc }}) unless on () kube_deployment_spec_replicas{ {{- get $deploy "httpapi" }}{{ $kAnd }}})
        annotations:
          summary: No httpapi is ready
          description: >-
            No httpapi{{ $inNs }} has answered /readyz with 200 for
            {{ $a.HeadcountNoHTTPAPIReady.for }}, or none is scraped: backends cannot publish events
            or read counts, and webhooks are not delivered.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountnohttpapiready

      # Any of a process's Redis error counters rising in every 2m window
      # for 5m: longer than a Sentinel failover or a Cluster resharding
      # blip, which go-redis rides out with a few errors. One alert per
      # process (the branches keep only its target labels, so `or` merges
      # them): wsnode count flushes; pub/sub publishes, subscribes and lost
      # connections (wsnode and httpapi); httpapi reads and readiness pings,
      # and rate-limit checks let through; cleaner scans.
      - alert: HeadcountRedisErrors
        expr: |-
          sum without (result) (rate(headcount_counts_flushes_total{result="error"{{ $hcAnd }}}[2m])) > 0
          or rate(headcount_fanout_publish_errors_total{{ $hc }}[2m]) > 0
          or rate(headcount_fanout_subscribe_errors_total{{ $hc }}[2m]) > 0
          or rate(headcount_fanout_outages_total{{ $hc }}[2m]) > 0
          or rate(headcount_httpapi_redis_errors_total{{ $hc }}[2m]) > 0
          or sum without (kind) (rate(headcount_ratelimit_errors_total{{ $hc }}[2m])) > 0
          or sum without (result) (rate(headcount_cleaner_scans_total{result="error"{{ $hcAnd }}}[2m])) > 0
        annotations:
          summary: A headcount process keeps getting Redis errors
          description: >-
            {{ $pod }} has counted Redis errors in every 2 minutes for
            {{ $a.HeadcountRedisErrors.for }} (count flushes, pub/sub, API reads or cleaner scans;
            {{`{{ $value | humanize }}`}}/s in the first of those that fails).
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountrediserrors

      # The socket cap (--max-sockets, or derived from the open-file limit)
      # is hard: past it the node answers 503. At 90% for 5m the node is
      # full, not passing a spike; the HPA scales on CPU and memory, not on
      # sockets, so it may not add a node by itself.
      - alert: HeadcountWsnodeNearSocketCap
        expr: headcount_wsnode_port_connections{{ $hc }} / (headcount_wsnode_max_sockets{{ $hc }} > 0) > {{ $a.HeadcountWsnodeNearSocketCap.threshold }}
        annotations:
          summary: A wsnode is near its socket cap
          description: >-
            wsnode {{ $pod }} has held more than {{ $a.HeadcountWsnodeNearSocketCap.threshold }} of
            its socket cap for {{ $a.HeadcountWsnodeNearSocketCap.for }}
            ({{`{{ $value | humanizePercentage }}`}}); connections past the cap are refused with
            503.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountwsnodenearsocketcap

      # The Go runtime keeps the heap under GOMEMLIMIT (88% of the limit in
      # deploy/k8s and the chart) by collecting harder; a working set above
      # 90% of the limit for 15m means it no longer can, and the kernel
      # OOM-kills the node next, closing every socket on it at once.
      # cAdvisor's and kube-state-metrics' series, as kube-prometheus-stack
      # scrapes them.
      - alert: HeadcountWsnodeMemoryNearLimit
        expr: |-
          max by (namespace, pod) (container_memory_working_set_bytes{container="wsnode"{{ $kAnd }}})
            / max by (namespace, pod) (kube_pod_container_resource_limits{resource="memory", container="wsnode"{{ $kAnd }}} > 0)
            > {{ $a.HeadcountWsnodeMemoryNearLimit.threshold }}
        annotations:
          summary: A wsnode's memory is near its limit
          description: >-
            wsnode {{`{{ $labels.pod }}`}}{{ $inNs }} has used
            {{`{{ $value | humanizePercentage }}`}} of its memory limit (more than
            {{ $a.HeadcountWsnodeMemoryNearLimit.threshold }}) for
            {{ $a.HeadcountWsnodeMemoryNearLimit.for }}: past its GOMEMLIMIT, and the kernel
            OOM-kills it at the limit, closing all its sockets.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountwsnodememorynearlimit

      # At --max-connections httpapi first closes idle keep-alive
      # connections, which is harmless; a refusal (or a failed accept, out
      # of file descriptors) means every connection is busy, and clients get
      # 503. Refusals in every 5m window for 5m is no single burst.
      - alert: HeadcountHTTPAPIAtConnectionCap
        expr: rate(headcount_httpapi_connections_refused_total{{ $hc }}[5m]) > 0 or rate(headcount_httpapi_accept_errors_total{{ $hc }}[5m]) > 0
        annotations:
          summary: An httpapi refuses connections at its cap
          description: >-
            httpapi {{ $pod }} has refused connections with 503 (every one busy at
            --max-connections) or failed accepts for {{ $a.HeadcountHTTPAPIAtConnectionCap.for }}
            ({{`{{ $value | humanize }}`}}/s).
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcounthttpapiatconnectioncap

      # 5xx from the API (GET /up's 503 is readiness, not an error) above 5%
      # of requests for 10m: Redis failing under the API, or a bug.
      - alert: HeadcountHTTPAPIErrors
        expr: |-
          sum without (route, code) (rate(headcount_httpapi_requests_total{code=~"5..", route!="GET /up"{{ $hcAnd }}}[5m]))
            / sum without (route, code) (rate(headcount_httpapi_requests_total{route!="GET /up"{{ $hcAnd }}}[5m]))
            > {{ $a.HeadcountHTTPAPIErrors.threshold }}
        annotations:
          summary: An httpapi answers many requests with 5xx
          description: >-
            httpapi {{ $pod }} has answered {{`{{ $value | humanizePercentage }}`}} of its API
            requests with a 5xx (more than {{ $a.HeadcountHTTPAPIErrors.threshold }}) for
            {{ $a.HeadcountHTTPAPIErrors.for }}.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcounthttpapierrors

      # The API's answers are a Redis round trip or two: a p99 over all
      # replicas and routes (GET /up aside) above 1 s for 10m is Redis slow
      # or failing over, the replicas starved of CPU, or listings of very
      # many channels. Backends' publishes wait that long.
      - alert: HeadcountHTTPAPISlow
        expr: |-
          histogram_quantile(0.99,
            sum by (namespace, le) (rate(headcount_httpapi_request_duration_seconds_bucket{route!="GET /up"{{ $hcAnd }}}[5m]))
          ) > {{ $a.HeadcountHTTPAPISlow.threshold }}
        annotations:
          summary: The HTTP API answers slowly
          description: >-
            The 99th percentile of API requests{{ $inNs }} has taken
            {{`{{ $value | humanizeDuration }}`}} (over {{ $a.HeadcountHTTPAPISlow.threshold }} s)
            for {{ $a.HeadcountHTTPAPISlow.for }}.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcounthttpapislow

      # A socket whose send queue fills is cut (a slow consumer). A few are
      # normal (phones on bad networks); more than 1% of the node's open
      # sockets, and at least 10, in every 5 minutes for 10m means the node
      # cannot write fast enough: CPU, network egress, or a burst of fan-out
      # (a hot channel, large events).
      - alert: HeadcountSlowConsumersSurging
        expr: increase(headcount_wsnode_slow_consumers_total{{ $hc }}[5m]) > clamp_min({{ $a.HeadcountSlowConsumersSurging.threshold }} * headcount_wsnode_connections_open{{ $hc }}, {{ $a.HeadcountSlowConsumersSurging.minCuts }})
        annotations:
          summary: A wsnode cuts many slow consumers
          description: >-
            wsnode {{ $pod }} disconnected {{`{{ $value | humanize }}`}} sockets in 5 minutes
            because their send queue was full, more than
            {{ $a.HeadcountSlowConsumersSurging.threshold }} of its open sockets, for
            {{ $a.HeadcountSlowConsumersSurging.for }}.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountslowconsumerssurging

  - name: headcount-dependencies
    rules:
      # The counts never expire, so Redis must run with noeviction: at
      # maxmemory it refuses writes, and counts, heartbeats and webhook
      # events fail (HeadcountRedisErrors). 90% for 10m leaves time to add
      # memory or shards. redis_exporter's series: only where it runs.
      - alert: HeadcountRedisMemoryHigh
        expr: redis_memory_used_bytes{{ $redis }} / (redis_memory_max_bytes{{ $redis }} > 0) > {{ $a.HeadcountRedisMemoryHigh.threshold }}
        annotations:
          summary: Redis memory is near its maxmemory
          description: >-
            Redis {{ $pod }}{{ $inNs }} has used
            {{`{{ $value | humanizePercentage }}`}} of its maxmemory (more than
            {{ $a.HeadcountRedisMemoryHigh.threshold }}) for {{ $a.HeadcountRedisMemoryHigh.for }}.
            At maxmemory it refuses writes: counts and heartbeats fail.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountredismemoryhigh

      # A Redis TLS client certificate or CA that expires stops every
      # connection to Redis at once, on every process: 14 days leaves time
      # to rotate the Secret. Pods load the same files, so one alert per
      # file and namespace.
      - alert: HeadcountTLSCertificateExpiring
        expr: min by (namespace, file) (headcount_tls_cert_expiry_timestamp_seconds{{ $hc }}) - time() < {{ $a.HeadcountTLSCertificateExpiring.days }} * 86400
        annotations:
          summary: A Redis TLS certificate expires soon
          description: >-
            The certificate in {{`{{ $labels.file }}`}}{{ $inNs }} expires in
            {{`{{ $value | humanizeDuration }}`}} (under
            {{ $a.HeadcountTLSCertificateExpiring.days }} days; negative: expired). Once it has, no
            process can connect to Redis.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcounttlscertificateexpiring

  - name: headcount-webhooks
    rules:
      # A webhook event is given up after 5 minutes of failed attempts (or
      # skipped as unreadable), with an error log line. Each is a lost
      # event for the receiver, so any one is reported.
      - alert: HeadcountWebhookEventsGivenUp
        expr: sum without (reason) (increase(headcount_webhook_dropped_total{{ $hc }}[10m])) > 0
        annotations:
          summary: A webhook gave up events
          description: >-
            {{`{{ $value | humanize }}`}} events for webhook {{`{{ $labels.webhook }}`}} of app
            {{`{{ $labels.app }}`}} were given up in the last 10 minutes (failed for the whole
            5-minute retry window, or unreadable in the log).
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountwebhookeventsgivenup

      # The oldest event read and not yet delivered or given up. A healthy
      # webhook keeps it within the 3 s debounce and its batch wait (at most
      # 60 s). Past 2 minutes for 1m, the receiver fails or falls behind and
      # give-ups start at 5 minutes: this comes first.
      - alert: HeadcountWebhookBacklogOld
        expr: time() - (headcount_webhook_oldest_pending_timestamp_seconds{{ $hc }} > 0) > {{ $a.HeadcountWebhookBacklogOld.threshold }}
        annotations:
          summary: A webhook's deliveries fall behind
          description: >-
            The oldest undelivered event of webhook {{`{{ $labels.webhook }}`}} of app
            {{`{{ $labels.app }}`}} is {{`{{ $value | humanizeDuration }}`}} old (replica
            {{ $pod }}). Events are given up once 5 minutes old.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountwebhookbacklogold

      # The app's event log holds its byte budget (maxWebhookLogSizeInMb):
      # new events are not logged at all, for any of its webhooks.
      - alert: HeadcountWebhookLogFull
        expr: increase(headcount_webhook_log_dropped_total{{ $hc }}[10m]) > 0 or sum without (reason) (increase(headcount_webhook_events_dropped_total{reason="log_full"{{ $hcAnd }}}[10m])) > 0
        annotations:
          summary: An app's webhook event log is full
          description: >-
            The event log of app {{`{{ $labels.app }}`}} held its byte budget and refused
            {{`{{ $value | humanize }}`}} events in the last 10 minutes: its webhooks will not get
            them.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountwebhooklogfull

  - name: headcount-history
    rules:
      # An app's channel histories hold their byte budget
      # (--history-budget-mb): their oldest events go before their
      # channel's events or seconds say, so a page that resumes from one
      # of them is told headcount:resume_failed instead of getting it.
      - alert: HeadcountHistoryOverBudget
        expr: sum without (reason) (increase(headcount_history_dropped_total{reason="budget"{{ $hcAnd }}}[10m])) > 0
        annotations:
          summary: An app's channel histories are over their byte budget
          description: >-
            The channel histories of app {{`{{ $labels.app }}`}} gave up
            {{`{{ $value | humanize }}`}} events to their byte budget in the last 10 minutes
            (replica {{ $pod }}): pages that resume from before them are told
            headcount:resume_failed.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcounthistoryoverbudget

  - name: headcount-apps
    rules:
      # The apps' source (file or database) cannot be read or holds invalid
      # apps: the last good apps keep serving, but changes (new apps, a
      # secret rotation) do not apply. A file written in place may fail one
      # read; 5m is a broken source.
      - alert: HeadcountAppsSourceFailing
        expr: headcount_apps_source_up{{ $hc }} == 0
        annotations:
          summary: A headcount process cannot read its apps
          description: >-
            The last reads of the apps' source by {{ $pod }} failed for
            {{ $a.HeadcountAppsSourceFailing.for }}: it serves the apps it loaded last, and changes
            to them do not apply.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountappssourcefailing

      # Every process reads the same source, so all serve one set of apps
      # (one content hash) within seconds of a change, or a minute or two
      # for a Kubernetes Secret to reach the pods. Two sets for 15m: some
      # processes serve old apps (keys, secrets, limits, webhooks).
      - alert: HeadcountAppsOutOfSync
        expr: count by (namespace) (count by (namespace, hash) (headcount_apps_version_info{{ $hc }})) > 1
        annotations:
          summary: Processes serve different sets of apps
          description: >-
            The processes{{ $inNs }} have served {{`{{ $value }}`}} different sets of apps
            (headcount_apps_version_info hashes) for {{ $a.HeadcountAppsOutOfSync.for }}.
          runbook_url: https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#headcountappsoutofsync
{{- end }}
