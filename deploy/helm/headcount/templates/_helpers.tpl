{{/*
The chart's name (nameOverride), and the release-scoped prefix of every
object's name (fullnameOverride), as `helm create` makes them: two
releases in one namespace, or this chart as a subchart, never share a name.
*/}}
{{- define "headcount.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "headcount.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The name of one of the release's objects: (dict "root" $ "name" "wsnode")
is <fullname>-wsnode.
*/}}
{{- define "headcount.objname" -}}
{{- printf "%s-%s" (include "headcount.fullname" .root) .name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "headcount.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "headcount.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Labels of every object the chart makes.
*/}}
{{- define "headcount.chartLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of the headcount objects (not the single Redis): part-of selects
them in the metrics Service and the NetworkPolicies, as in deploy/k8s.
*/}}
{{- define "headcount.labels" -}}
app.kubernetes.io/part-of: headcount
{{ include "headcount.chartLabels" . }}
{{- end }}

{{/*
What selects one workload's pods: (dict "root" $ "name" "wsnode"). The
component's name, as deploy/k8s selects, and the release, so that another
release in the namespace is never selected.
*/}}
{{- define "headcount.selectorLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/*
What selects every headcount binary of the release (not its Redis): the
metrics Service and the NetworkPolicies, never {} (other applications may
share the namespace).
*/}}
{{- define "headcount.binarySelector" -}}
app.kubernetes.io/part-of: headcount
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
A headcount workload's pod labels: (dict "root" $ "name" "wsnode"
"component" "websocket"), then podLabels, chart-wide and the workload's.
*/}}
{{- define "headcount.podLabels" -}}
{{- $v := index .root.Values .name }}
{{- $l := merge (dict) (default (dict) $v.podLabels) (default (dict) .root.Values.podLabels) (default (dict) .root.Values.commonLabels) }}
{{- $_ := set $l "app.kubernetes.io/name" .name }}
{{- $_ := set $l "app.kubernetes.io/component" .component }}
{{- $_ := set $l "app.kubernetes.io/part-of" "headcount" }}
{{- $_ := set $l "app.kubernetes.io/instance" .root.Release.Name }}
{{- toYaml $l }}
{{- end }}

{{/*
The image: registry/repository, then the digest, or the tag (by default the
chart's appVersion, the release this chart was made for).
*/}}
{{- define "headcount.image" -}}
{{- $i := .Values.image }}
{{- $repo := $i.repository }}
{{- with $i.registry }}{{ $repo = printf "%s/%s" . $repo }}{{ end }}
{{- if $i.digest -}}
{{ $repo }}@{{ $i.digest }}
{{- else -}}
{{ $repo }}:{{ $i.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/*
Settings the chart derives from redis.*, apps.* and its fixed ports, so
config maps may not set them: each with the value to use instead.
*/}}
{{- define "headcount.reserved" -}}
{{- toJson (dict
  "HEADCOUNT_REDIS" "redis.mode and redis.url"
  "HEADCOUNT_REDIS_CLUSTER" "redis.cluster.seeds"
  "HEADCOUNT_REDIS_SENTINEL" "redis.sentinel.addresses"
  "HEADCOUNT_REDIS_SENTINEL_MASTER" "redis.sentinel.masterName"
  "HEADCOUNT_REDIS_SENTINEL_USERNAME" "redis.sentinel.username"
  "HEADCOUNT_REDIS_SENTINEL_PASSWORD" "redis.sentinel.password"
  "HEADCOUNT_REDIS_SENTINEL_PASSWORD_FILE" "redis.sentinel.password"
  "HEADCOUNT_REDIS_USERNAME" "redis.username"
  "HEADCOUNT_REDIS_PASSWORD" "redis.password"
  "HEADCOUNT_REDIS_PASSWORD_FILE" "redis.password"
  "HEADCOUNT_REDIS_TLS" "redis.tls.enabled"
  "HEADCOUNT_REDIS_TLS_CA" "redis.tls"
  "HEADCOUNT_REDIS_TLS_CERT" "redis.tls"
  "HEADCOUNT_REDIS_TLS_KEY" "redis.tls"
  "HEADCOUNT_APPS_FILE" "apps"
  "HEADCOUNT_APPS_DB" "apps.database"
  "HEADCOUNT_APPS_DB_TABLE" "apps.database.table"
  "HEADCOUNT_APP_ID" "apps"
  "HEADCOUNT_APP_KEY" "apps"
  "HEADCOUNT_APP_SECRET" "apps"
  "HEADCOUNT_ADDR" "nothing: the ports are fixed, as the Services and probes expect"
  "HEADCOUNT_ADMIN_ADDR" "nothing: the ports are fixed, as the Services and probes expect"
  "HEADCOUNT_ADVERTISE_HOST" "nothing: wsnode advertises its pod IP"
  "GOMEMLIMIT" "<binary>.goMemLimit"
  "GOGC" "wsnode.goGC"
) }}
{{- end }}

{{/*
Copies a values map of settings into a ConfigMap's data: (dict "into" $d
"from" .Values.config "where" "config" "root" $).
*/}}
{{- define "headcount.addSettings" -}}
{{- $reserved := include "headcount.reserved" .root | fromJson }}
{{- range $k, $v := .from }}
{{- if hasKey $reserved $k }}
{{- fail (printf "%s.%s: the chart sets it; use %s" $.where $k (get $reserved $k)) }}
{{- end }}
{{- $_ := set $.into $k (toString $v) }}
{{- end }}
{{- end }}

{{/*
The data of headcount-config: Redis and apps settings, then config.
*/}}
{{- define "headcount.commonConfig" -}}
{{- $r := .Values.redis }}
{{- $d := dict }}
{{- if eq .Values.apps.source "file" }}
{{- $_ := set $d "HEADCOUNT_APPS_FILE" "/etc/headcount/apps.json" }}
{{- else if eq .Values.apps.source "database" }}
{{- with .Values.apps.database.table }}{{ $_ := set $d "HEADCOUNT_APPS_DB_TABLE" . }}{{ end }}
{{- end }}
{{- if eq $r.mode "single" }}
{{- $_ := set $d "HEADCOUNT_REDIS" (printf "redis://%s:6379/0" (include "headcount.objname" (dict "root" . "name" "redis"))) }}
{{- else if eq $r.mode "url" }}
{{- $_ := set $d "HEADCOUNT_REDIS" $r.url }}
{{- else if eq $r.mode "cluster" }}
{{- $_ := set $d "HEADCOUNT_REDIS_CLUSTER" (join "," $r.cluster.seeds) }}
{{- else if eq $r.mode "sentinel" }}
{{- $_ := set $d "HEADCOUNT_REDIS_SENTINEL" (join "," $r.sentinel.addresses) }}
{{- $_ := set $d "HEADCOUNT_REDIS_SENTINEL_MASTER" $r.sentinel.masterName }}
{{- with $r.sentinel.username }}{{ $_ := set $d "HEADCOUNT_REDIS_SENTINEL_USERNAME" . }}{{ end }}
{{- end }}
{{- with $r.username }}{{ $_ := set $d "HEADCOUNT_REDIS_USERNAME" . }}{{ end }}
{{- if $r.tls.enabled }}{{ $_ := set $d "HEADCOUNT_REDIS_TLS" "true" }}{{ end }}
{{- with $r.tls.caKey }}{{ $_ := set $d "HEADCOUNT_REDIS_TLS_CA" (printf "/etc/headcount-redis-tls/%s" .) }}{{ end }}
{{- with $r.tls.certKey }}{{ $_ := set $d "HEADCOUNT_REDIS_TLS_CERT" (printf "/etc/headcount-redis-tls/%s" .) }}{{ end }}
{{- with $r.tls.keyKey }}{{ $_ := set $d "HEADCOUNT_REDIS_TLS_KEY" (printf "/etc/headcount-redis-tls/%s" .) }}{{ end }}
{{- include "headcount.addSettings" (dict "into" $d "from" .Values.config "where" "config" "root" .) }}
{{- toYaml $d }}
{{- end }}

{{/*
The data of a binary's own ConfigMap: (dict "root" $ "binary" "wsnode").
*/}}
{{- define "headcount.binaryConfig" -}}
{{- $d := dict }}
{{- $v := index .root.Values .binary }}
{{- include "headcount.addSettings" (dict "into" $d "from" $v.config "where" (printf "%s.config" .binary) "root" .root) }}
{{- toYaml $d }}
{{- end }}

{{/*
Refuses values that cannot work, before anything is rendered.
*/}}
{{- define "headcount.check" -}}
{{- $r := .Values.redis }}
{{- if eq $r.mode "url" }}
{{- if not (or (hasPrefix "redis://" $r.url) (hasPrefix "rediss://" $r.url)) }}
{{- fail "redis.url: a redis:// or rediss:// URL is required with redis.mode url" }}
{{- end }}
{{- if contains ":" (urlParse $r.url).userinfo }}
{{- fail "redis.url holds a password, and it would be in a ConfigMap: use redis.password.existingSecret" }}
{{- end }}
{{- else if eq $r.mode "cluster" }}
{{- if not $r.cluster.seeds }}{{ fail "redis.cluster.seeds: at least one host:port with redis.mode cluster" }}{{ end }}
{{- else if eq $r.mode "sentinel" }}
{{- if not $r.sentinel.addresses }}{{ fail "redis.sentinel.addresses: at least one host:port with redis.mode sentinel" }}{{ end }}
{{- if not $r.sentinel.masterName }}{{ fail "redis.sentinel.masterName is required with redis.mode sentinel" }}{{ end }}
{{- else if ne $r.mode "single" }}
{{- fail (printf "redis.mode %q: one of single, url, cluster, sentinel" $r.mode) }}
{{- end }}
{{- if and (eq $r.mode "single") (or $r.tls.enabled $r.tls.existingSecret) }}
{{- fail "redis.tls: the single Redis of mode single serves no TLS; use mode url, cluster or sentinel" }}
{{- end }}
{{- if and (or $r.tls.caKey $r.tls.certKey $r.tls.keyKey) (not $r.tls.existingSecret) }}
{{- fail "redis.tls: caKey, certKey and keyKey name keys of redis.tls.existingSecret, which is empty" }}
{{- end }}
{{- if ne (empty $r.tls.certKey) (empty $r.tls.keyKey) }}
{{- fail "redis.tls: certKey and keyKey go together (a client certificate and its key)" }}
{{- end }}
{{- if and $r.sentinel.password.existingSecret (ne $r.mode "sentinel") }}
{{- fail "redis.sentinel.password: only with redis.mode sentinel" }}
{{- end }}
{{- if eq .Values.apps.source "database" }}
{{- if not .Values.apps.database.existingSecret }}
{{- fail "apps.database.existingSecret: the Secret holding the database URL is required with apps.source database" }}
{{- end }}
{{- else if eq .Values.apps.source "file" }}
{{- if and (not .Values.apps.existingSecret) (not .Values.apps.list) }}
{{- fail "apps.list is empty and apps.existingSecret unset: the binaries would have no apps" }}
{{- end }}
{{- else }}
{{- fail (printf "apps.source %q: file or database" .Values.apps.source) }}
{{- end }}
{{- end }}

{{/*
The port of a host:port, or fails naming where it came from.
*/}}
{{- define "headcount.port" -}}
{{- $p := regexFind ":[0-9]+$" .addr | trimPrefix ":" }}
{{- if not $p }}{{ fail (printf "%s: %q has no :port" .where .addr) }}{{ end }}
{{- $p }}
{{- end }}

{{/*
The ports the headcount pods dial an external Redis on, as a JSON list.
*/}}
{{- define "headcount.redisPorts" -}}
{{- $r := .Values.redis }}
{{- $ports := list }}
{{- if eq $r.mode "cluster" }}
{{- range $r.cluster.seeds }}{{ $ports = append $ports (include "headcount.port" (dict "addr" . "where" "redis.cluster.seeds")) }}{{ end }}
{{- else if eq $r.mode "sentinel" }}
{{- range $r.sentinel.addresses }}{{ $ports = append $ports (include "headcount.port" (dict "addr" . "where" "redis.sentinel.addresses")) }}{{ end }}
{{- $ports = append $ports (toString $r.sentinel.masterPort) }}
{{- else if eq $r.mode "url" }}
{{- $host := (urlParse $r.url).host }}
{{- $p := regexFind ":[0-9]+$" $host | trimPrefix ":" }}
{{- $ports = append $ports (default "6379" $p) }}
{{- end }}
{{- toJson (uniq $ports) }}
{{- end }}

{{/*
The Secret holding the Redis servers' password, and its key: yours
(redis.password.existingSecret), or in mode single the one the chart
generates; empty: no password.
*/}}
{{- define "headcount.redisPasswordSecret" -}}
{{- if .Values.redis.password.existingSecret }}
{{- .Values.redis.password.existingSecret }}
{{- else if eq .Values.redis.mode "single" }}
{{- include "headcount.objname" (dict "root" . "name" "redis-auth") }}
{{- end }}
{{- end }}

{{/*
A workload's value, or the chart-wide one when the workload's is empty:
(dict "root" $ "binary" "wsnode" "key" "nodeSelector").
*/}}
{{- define "headcount.pick" -}}
{{- $v := index .root.Values .binary }}
{{- $x := index $v .key | default (index .root.Values .key) }}
{{- with $x }}{{ toYaml . }}{{ end }}
{{- end }}

{{/*
Topology spread over nodes and zones, unless the workload's
topologySpreadConstraints replaces it: (dict "root" $ "name" "wsnode").
DoNotSchedule over nodes, but only among nodes the pod may run on
(nodeTaintsPolicy and nodeAffinityPolicy Honor): a cordoned node, a tainted
pool or a node outside nodeSelector is no empty domain that holds an
evicted pod Pending behind its disruption budget. ScheduleAnyway for
zones: a DoNotSchedule zone rule leaves pods Pending on nodes without a
zone label (bare metal, kind).
*/}}
{{- define "headcount.spread" -}}
{{- $v := index .root.Values .name }}
{{- if $v.topologySpreadConstraints }}
{{- toYaml $v.topologySpreadConstraints }}
{{- else -}}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: DoNotSchedule
  nodeAffinityPolicy: Honor
  nodeTaintsPolicy: Honor
  labelSelector:
    matchLabels:
      {{- include "headcount.selectorLabels" . | nindent 6 }}
  matchLabelKeys:
    - pod-template-hash
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "headcount.selectorLabels" . | nindent 6 }}
  matchLabelKeys:
    - pod-template-hash
{{- end }}
{{- end }}

{{/*
A headcount container's envFrom and env: (dict "root" $ "binary" "wsnode").
Passwords and the database URL come from Secrets through secretKeyRef.
*/}}
{{- define "headcount.env" -}}
{{- $r := .root.Values.redis }}
{{- $v := index .root.Values .binary -}}
envFrom:
  - configMapRef:
      name: {{ include "headcount.objname" (dict "root" .root "name" "config") }}
  - configMapRef:
      name: {{ include "headcount.objname" (dict "root" .root "name" (printf "%s-config" .binary)) }}
{{- with concat (default (list) .root.Values.extraEnvFrom) (default (list) $v.extraEnvFrom) }}
{{ toYaml . | indent 2 }}
{{- end }}
env:
  - name: GOMEMLIMIT
    value: {{ $v.goMemLimit | quote }}
{{- with $v.goGC }}
  - name: GOGC
    value: {{ . | quote }}
{{- end }}
{{- if eq .binary "wsnode" }}
  # Where the active cleaner watches this node's admin port (GET
  # /liveness), to reap it the moment it is killed.
  - name: HEADCOUNT_ADVERTISE_HOST
    valueFrom:
      fieldRef:
        fieldPath: status.podIP
{{- end }}
{{- if include "headcount.redisPasswordSecret" .root }}
  # A file the kubelet updates when the Secret changes, which the binaries
  # re-read: a rotated password needs no restart (an env var would).
  - name: HEADCOUNT_REDIS_PASSWORD_FILE
    value: /etc/headcount-redis-password/password
{{- end }}
{{- if $r.sentinel.password.existingSecret }}
  - name: HEADCOUNT_REDIS_SENTINEL_PASSWORD_FILE
    value: /etc/headcount-redis-sentinel-password/password
{{- end }}
{{- if eq .root.Values.apps.source "database" }}
  - name: HEADCOUNT_APPS_DB
    valueFrom:
      secretKeyRef:
        name: {{ .root.Values.apps.database.existingSecret }}
        key: {{ .root.Values.apps.database.key }}
{{- end }}
{{- with concat (default (list) .root.Values.extraEnv) (default (list) $v.extraEnv) }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- end }}

{{/*
A headcount container's volume mounts: (dict "root" $ "binary" "wsnode").
The apps file's Secret is mounted as a directory, never with subPath: the
kubelet never updates a subPath mount, and the binaries reload the file
live when the Secret changes.
*/}}
{{- define "headcount.volumeMounts" -}}
{{- $v := index .root.Values .binary }}
{{- $extra := concat (default (list) .root.Values.extraVolumeMounts) (default (list) $v.extraVolumeMounts) }}
{{- $pw := include "headcount.redisPasswordSecret" .root }}
{{- $sentinelPw := .root.Values.redis.sentinel.password.existingSecret }}
{{- if or (eq .root.Values.apps.source "file") .root.Values.redis.tls.existingSecret $pw $sentinelPw $extra }}
volumeMounts:
{{- if eq .root.Values.apps.source "file" }}
  - name: apps
    mountPath: /etc/headcount
    readOnly: true
{{- end }}
{{- if .root.Values.redis.tls.existingSecret }}
  - name: redis-tls
    mountPath: /etc/headcount-redis-tls
    readOnly: true
{{- end }}
{{- if $pw }}
  - name: redis-password
    mountPath: /etc/headcount-redis-password
    readOnly: true
{{- end }}
{{- if $sentinelPw }}
  - name: redis-sentinel-password
    mountPath: /etc/headcount-redis-sentinel-password
    readOnly: true
{{- end }}
{{- with $extra }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{- define "headcount.volumes" -}}
{{- $v := index .root.Values .binary }}
{{- $a := .root.Values.apps }}
{{- $extra := concat (default (list) .root.Values.extraVolumes) (default (list) $v.extraVolumes) }}
{{- $pw := include "headcount.redisPasswordSecret" .root }}
{{- $sentinel := .root.Values.redis.sentinel.password }}
{{- if or (eq $a.source "file") .root.Values.redis.tls.existingSecret $pw $sentinel.existingSecret $extra }}
volumes:
{{- if eq $a.source "file" }}
  - name: apps
    secret:
      secretName: {{ $a.existingSecret | default (include "headcount.objname" (dict "root" .root "name" "apps")) }}
      {{- if and $a.existingSecret (ne $a.existingSecretKey "apps.json") }}
      items:
        - key: {{ $a.existingSecretKey }}
          path: apps.json
      {{- end }}
      defaultMode: 288 # 0440: readable by the user and fsGroup only
{{- end }}
{{- if .root.Values.redis.tls.existingSecret }}
  - name: redis-tls
    secret:
      secretName: {{ .root.Values.redis.tls.existingSecret }}
      defaultMode: 288
{{- end }}
{{- with $pw }}
  - name: redis-password
    secret:
      secretName: {{ . }}
      items:
        - key: {{ $.root.Values.redis.password.key }}
          path: password
      defaultMode: 288
{{- end }}
{{- with $sentinel.existingSecret }}
  - name: redis-sentinel-password
    secret:
      secretName: {{ . }}
      items:
        - key: {{ $sentinel.key }}
          path: password
      defaultMode: 288
{{- end }}
{{- with $extra }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A headcount workload's pod spec, but for its containers' own lines:
(dict "root" $ "binary" "wsnode"). Scheduling values are the workload's,
or the chart-wide ones when the workload's are empty. A Job's pod names
the binary whose volumes it mounts ("volumesOf" "cleaner") and sets
"once" true: one pod that runs to its end has nothing to spread.
*/}}
{{- define "headcount.podSpec" -}}
{{- $v := index .root.Values .binary -}}
serviceAccountName: {{ include "headcount.serviceAccountName" .root }}
automountServiceAccountToken: false
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if not .once }}
topologySpreadConstraints:
  {{- include "headcount.spread" (dict "root" .root "name" .binary) | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName | default .root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- range $key := list "nodeSelector" "tolerations" "affinity" }}
{{- with include "headcount.pick" (dict "root" $.root "binary" $.binary "key" $key) }}
{{ $key }}:
  {{- . | nindent 2 }}
{{- end }}
{{- end }}
{{- with $v.initContainers }}
initContainers:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "headcount.volumes" (dict "root" .root "binary" (.volumesOf | default .binary)) | trim }}
{{ . }}
{{- end }}
{{- end }}

{{/*
A probe: the chart's (dict "root" $ "binary" "wsnode" "probe" "readinessProbe"
"path" "/readyz" "period" 2 "timeout" 2 "failures" 2 "delay" 0), with the
workload's probe timings over it.
*/}}
{{- define "headcount.probe" -}}
{{- $v := index .root.Values .binary }}
{{- $p := dict "httpGet" (dict "path" .path "port" "metrics") "periodSeconds" .period "timeoutSeconds" .timeout "failureThreshold" .failures }}
{{- if .delay }}{{ $_ := set $p "initialDelaySeconds" .delay }}{{ end }}
{{- with (default (dict) $v.probes) | dig .probe nil }}{{ $p = mergeOverwrite $p (deepCopy .) }}{{ end }}
{{- toYaml $p }}
{{- end }}

{{/*
The pod template's annotations: a checksum of the settings it reads, so a
change rolls the pods (the binaries read them only at start; the apps are
reloaded live and take no part in it), then podAnnotations, chart-wide and
the workload's.
*/}}
{{- define "headcount.podAnnotations" -}}
{{- $v := index .root.Values .binary -}}
{{- $a := merge (dict) (default (dict) $v.podAnnotations) (default (dict) .root.Values.podAnnotations) }}
{{- $_ := set $a "checksum/config" (printf "%s\n%s" (include "headcount.commonConfig" .root) (include "headcount.binaryConfig" .) | sha256sum) }}
{{- toYaml $a }}
{{- end }}

{{/*
A workload's PodDisruptionBudget: (dict "root" $ "binary" "wsnode").
*/}}
{{- define "headcount.pdb" -}}
{{- $v := index .root.Values .binary }}
{{- if $v.pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "headcount.objname" (dict "root" .root "name" .binary) }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "headcount.labels" .root | nindent 4 }}
spec:
  {{- toYaml (omit $v.pdb "enabled") | nindent 2 }}
  selector:
    matchLabels:
      {{- include "headcount.selectorLabels" (dict "root" .root "name" .binary) | nindent 6 }}
{{- end }}
{{- end }}

{{/*
A workload's Service: (dict "root" $ "binary" "wsnode" "component"
"websocket" "port" "ws" "number" 6001).
*/}}
{{- define "headcount.service" -}}
{{- $s := (index .root.Values .binary).service -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "headcount.objname" (dict "root" .root "name" .binary) }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    app.kubernetes.io/name: {{ .binary }}
    app.kubernetes.io/component: {{ .component }}
    {{- include "headcount.labels" .root | nindent 4 }}
  {{- with $s.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $s.type }}
  {{- if and $s.externalTrafficPolicy (ne $s.type "ClusterIP") }}
  externalTrafficPolicy: {{ $s.externalTrafficPolicy }}
  {{- end }}
  {{- if and $s.loadBalancerSourceRanges (eq $s.type "LoadBalancer") }}
  loadBalancerSourceRanges:
    {{- toYaml $s.loadBalancerSourceRanges | nindent 4 }}
  {{- end }}
  selector:
    {{- include "headcount.selectorLabels" (dict "root" .root "name" .binary) | nindent 4 }}
  ports:
    - name: {{ .port }}
      port: {{ .number }}
      targetPort: {{ .port }}
      protocol: TCP
      {{- if and $s.nodePort (ne $s.type "ClusterIP") }}
      nodePort: {{ $s.nodePort }}
      {{- end }}
{{- end }}

{{/*
Egress to the cluster's DNS, one NetworkPolicyEgressRule (a list item).
With NodeLocal DNSCache, add its address (169.254.20.10/32 by default) as
an ipBlock.
*/}}
{{- define "headcount.dnsEgressRule" -}}
- to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: kube-system
      podSelector:
        matchLabels:
          k8s-app: kube-dns
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end }}

{{/*
Egress to the release's Redis, one NetworkPolicyEgressRule (a list item):
the single Redis's pods, or an external Redis's ports at
redis.networkPolicy.to.
*/}}
{{- define "headcount.redisEgressRule" -}}
{{- if eq .Values.redis.mode "single" -}}
- to:
    - podSelector:
        matchLabels:
          {{- include "headcount.selectorLabels" (dict "root" . "name" "redis") | nindent 10 }}
  ports:
    - protocol: TCP
      port: 6379
{{- else -}}
- ports:
    {{- range include "headcount.redisPorts" . | fromJsonArray }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
  {{- with .Values.redis.networkPolicy.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
The single Redis's pod and container security contexts (its image runs as
the redis user, 999), which the toolbox shares.
*/}}
{{- define "headcount.redisPodSecurityContext" -}}
runAsNonRoot: true
runAsUser: 999
runAsGroup: 999
fsGroup: 999
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "headcount.redisContainerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}
