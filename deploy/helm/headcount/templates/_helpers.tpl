{{/*
Labels of every object the chart makes.
*/}}
{{- define "headcount.chartLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels of the headcount objects (not the single Redis): part-of selects
them in the metrics Service and the NetworkPolicies, as in deploy/k8s.
*/}}
{{- define "headcount.labels" -}}
app.kubernetes.io/part-of: headcount
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "headcount.chartLabels" . }}
{{- end }}

{{/*
A headcount workload's pod labels: (dict "root" $ "name" "wsnode"
"component" "websocket"). The selectors use app.kubernetes.io/name alone,
as deploy/k8s's do (a Deployment's selector is immutable).
*/}}
{{- define "headcount.podLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: headcount
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{- define "headcount.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
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
  "HEADCOUNT_REDIS_USERNAME" "redis.username"
  "HEADCOUNT_REDIS_PASSWORD" "redis.password"
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
  "GOMEMLIMIT" "<binary>.goMemLimit"
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
{{- $_ := set $d "HEADCOUNT_REDIS" "redis://redis:6379/0" }}
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
The pod's security context: non-root (the image's nonroot user, 65532),
RuntimeDefault seccomp; the namespace enforces "restricted".
*/}}
{{- define "headcount.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "headcount.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
Spread over nodes and zones: (dict "name" "wsnode"). ScheduleAnyway for
zones: a DoNotSchedule zone rule leaves pods Pending on nodes without a
zone label (bare metal, kind).
*/}}
{{- define "headcount.spread" -}}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: DoNotSchedule
  labelSelector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
  matchLabelKeys:
    - pod-template-hash
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
  matchLabelKeys:
    - pod-template-hash
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
      name: headcount-config
  - configMapRef:
      name: {{ .binary }}-config
env:
  - name: GOMEMLIMIT
    value: {{ $v.goMemLimit | quote }}
{{- with $r.password.existingSecret }}
  - name: HEADCOUNT_REDIS_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ . }}
        key: {{ $r.password.key }}
{{- end }}
{{- with $r.sentinel.password.existingSecret }}
  - name: HEADCOUNT_REDIS_SENTINEL_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ . }}
        key: {{ $r.sentinel.password.key }}
{{- end }}
{{- if eq .root.Values.apps.source "database" }}
  - name: HEADCOUNT_APPS_DB
    valueFrom:
      secretKeyRef:
        name: {{ .root.Values.apps.database.existingSecret }}
        key: {{ .root.Values.apps.database.key }}
{{- end }}
{{- with .root.Values.extraEnv }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- end }}

{{/*
A headcount container's volume mounts. The apps file's Secret is mounted as
a directory, never with subPath: the kubelet never updates a subPath mount,
and the binaries reload the file live when the Secret changes.
*/}}
{{- define "headcount.volumeMounts" -}}
{{- if or (eq .Values.apps.source "file") .Values.redis.tls.existingSecret }}
volumeMounts:
{{- if eq .Values.apps.source "file" }}
  - name: apps
    mountPath: /etc/headcount
    readOnly: true
{{- end }}
{{- if .Values.redis.tls.existingSecret }}
  - name: redis-tls
    mountPath: /etc/headcount-redis-tls
    readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{- define "headcount.volumes" -}}
{{- if or (eq .Values.apps.source "file") .Values.redis.tls.existingSecret }}
volumes:
{{- if eq .Values.apps.source "file" }}
  - name: apps
    secret:
      secretName: {{ .Values.apps.existingSecret | default "headcount-apps" }}
      {{- if and .Values.apps.existingSecret (ne .Values.apps.existingSecretKey "apps.json") }}
      items:
        - key: {{ .Values.apps.existingSecretKey }}
          path: apps.json
      {{- end }}
      defaultMode: 288 # 0440: readable by the user and fsGroup 65532 only
{{- end }}
{{- if .Values.redis.tls.existingSecret }}
  - name: redis-tls
    secret:
      secretName: {{ .Values.redis.tls.existingSecret }}
      defaultMode: 288
{{- end }}
{{- end }}
{{- end }}

{{/*
Scheduling values of a workload: (index .Values "wsnode").
*/}}
{{- define "headcount.scheduling" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The pod template's annotations: a checksum of the settings it reads, so a
change rolls the pods (the binaries read them only at start; the apps are
reloaded live and take no part in it).
*/}}
{{- define "headcount.podAnnotations" -}}
{{- $v := index .root.Values .binary -}}
checksum/config: {{ printf "%s\n%s" (include "headcount.commonConfig" .root) (include "headcount.binaryConfig" .) | sha256sum }}
{{- with $v.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}
