{{- /*
Named templates.

Public (other charts include these to inject the sidecar; see README.md):
  rebalance-sidecar.container        the sidecar container, as one list item
  rebalance-sidecar.initContainers   the container when sidecar.mode=native, else nothing
  rebalance-sidecar.containers       the container when sidecar.mode=classic, else nothing
  rebalance-sidecar.volumes          the pod volumes the sidecar needs (list items)
  rebalance-sidecar.appEnv           env items for the app: SIDECAR_URL, SIDECAR_API_TOKEN
  rebalance-sidecar.appLifecycle     the app container's `lifecycle` (preStop drain)
  rebalance-sidecar.podLabels        labels the pod must carry (Service/PodMonitor select them)
  rebalance-sidecar.terminationGracePeriodSeconds   the recommended grace period

Every public template takes either the root context ($) or a dict
  (dict "top" $ "values" <values with this chart's shape>)
so that a parent chart can pass (index .Values "rebalance-sidecar").
*/ -}}

{{- /*
Normalizes the argument of a public template into .out.top (the root context)
and .out.values (values with this chart's shape). Templates call it as
  {{- $c := dict }}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) }}
*/ -}}
{{- define "rebalance-sidecar.normalize" -}}
{{- $in := .in -}}
{{- if hasKey $in "top" -}}
{{- $_ := set .out "top" $in.top -}}
{{- $_ := set .out "values" (get $in "values" | default $in.top.Values) -}}
{{- else -}}
{{- $_ := set .out "top" $in -}}
{{- $_ := set .out "values" $in.Values -}}
{{- end -}}
{{- end -}}

{{- define "rebalance-sidecar.name" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $c.values.nameOverride | default "rebalance-sidecar" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rebalance-sidecar.fullname" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if $c.values.fullnameOverride -}}
{{- $c.values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := $c.values.nameOverride | default "rebalance-sidecar" -}}
{{- if contains $name $c.top.Release.Name -}}
{{- $c.top.Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" $c.top.Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "rebalance-sidecar.selectorLabels" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
app.kubernetes.io/name: {{ include "rebalance-sidecar.name" . }}
app.kubernetes.io/instance: {{ $c.top.Release.Name }}
{{- end -}}

{{- define "rebalance-sidecar.labels" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
helm.sh/chart: {{ (printf "%s-%s" $c.top.Chart.Name $c.top.Chart.Version) | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "rebalance-sidecar.selectorLabels" . }}
app.kubernetes.io/version: {{ $c.top.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: Helm
{{- with $c.values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- /* Marks pods that run the sidecar; the metrics Service and the PodMonitor select it. */ -}}
{{- define "rebalance-sidecar.podLabels" -}}
rebalance-sidecar.io/sidecar: {{ include "rebalance-sidecar.fullname" . }}
{{- end -}}

{{- define "rebalance-sidecar.image" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $img := $c.values.sidecar.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (toString ($img.tag | default $c.top.Chart.AppVersion)) -}}
{{- end -}}
{{- end -}}

{{- define "rebalance-sidecar.tokenSecretName" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $c.values.sidecar.token.existingSecret | default (include "rebalance-sidecar.fullname" .) -}}
{{- end -}}

{{- define "rebalance-sidecar.tokenSecretKey" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if $c.values.sidecar.token.existingSecret -}}
{{- $c.values.sidecar.token.existingSecretKey -}}
{{- else -}}
token
{{- end -}}
{{- end -}}

{{- /* "true" when SIDECAR_WEBHOOKS is configured at all. */ -}}
{{- define "rebalance-sidecar.hasWebhooks" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if or $c.values.sidecar.webhooks.existingSecret $c.values.sidecar.webhooks.items -}}true{{- end -}}
{{- end -}}

{{- define "rebalance-sidecar.webhooksSecretName" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $c.values.sidecar.webhooks.existingSecret | default (include "rebalance-sidecar.fullname" .) -}}
{{- end -}}

{{- define "rebalance-sidecar.webhooksSecretKey" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if $c.values.sidecar.webhooks.existingSecret -}}
{{- $c.values.sidecar.webhooks.existingSecretKey -}}
{{- else -}}
webhooks.json
{{- end -}}
{{- end -}}

{{- /* "true" when SIDECAR_GROUP_INSTANCE_ID comes from the pod name. */ -}}
{{- define "rebalance-sidecar.staticMembership" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $mode := $c.values.sidecar.staticMembership -}}
{{- if or (eq $mode "enabled") (and (eq $mode "auto") (eq $c.values.workload.kind "StatefulSet")) -}}true{{- end -}}
{{- end -}}

{{- /* The data volume comes from a volumeClaimTemplate instead of an emptyDir. */ -}}
{{- define "rebalance-sidecar.persistentData" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if and (eq $c.values.workload.kind "StatefulSet") $c.values.workload.statefulSet.persistence.enabled -}}true{{- end -}}
{{- end -}}

{{- /* Seconds, rounded up. */ -}}
{{- define "rebalance-sidecar.drainSeconds" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- div (add (int64 $c.values.sidecar.drainTimeoutMs) 999) 1000 -}}
{{- end -}}

{{- /*
terminationGracePeriodSeconds: the preStop drain (deadline), a revoke barrier
that may still be finishing, the app's own shutdown, and 5 s for the sidecar to
stop. An explicit value below that is rejected.
*/ -}}
{{- define "rebalance-sidecar.terminationGracePeriodSeconds" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $drain := int64 (include "rebalance-sidecar.drainSeconds" .) -}}
{{- $revoke := div (add (int64 $c.values.sidecar.revokeTimeoutMs) 999) 1000 -}}
{{- $need := add $drain $revoke (int64 $c.values.app.shutdownSeconds) 5 -}}
{{- $set := $c.values.workload.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $set -}}
{{- $need -}}
{{- else if lt (int64 $set) $need -}}
{{- fail (printf "workload.terminationGracePeriodSeconds=%v is too short: the drain deadline (%ds) + revoke timeout (%ds) + app.shutdownSeconds (%v) + 5s need %d. Raise it, or lower sidecar.drainTimeoutMs / sidecar.revokeTimeoutMs / app.shutdownSeconds." $set $drain $revoke $c.values.app.shutdownSeconds $need) -}}
{{- else -}}
{{- int64 $set -}}
{{- end -}}
{{- end -}}

{{- /* A scalar as text; whole numbers without an exponent (values files parse numbers as floats). */ -}}
{{- define "rebalance-sidecar.scalar" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{- /* librdkafka property name -> SIDECAR_KAFKA_ variable ("_" -> "__", "." -> "_"). */ -}}
{{- define "rebalance-sidecar.kafkaEnvName" -}}
{{- printf "SIDECAR_KAFKA_%s" (. | replace "_" "__" | replace "." "_" | upper) -}}
{{- end -}}

{{- define "rebalance-sidecar.validate" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $s := $c.values.sidecar -}}
{{- if not $s.kafka.bootstrapServers -}}
{{- fail "sidecar.kafka.bootstrapServers is required (SIDECAR_BOOTSTRAP_SERVERS)" -}}
{{- end -}}
{{- if not $s.kafka.groupId -}}
{{- fail "sidecar.kafka.groupId is required (SIDECAR_GROUP_ID)" -}}
{{- end -}}
{{- if not $s.kafka.topics -}}
{{- fail "sidecar.kafka.topics needs at least one topic (SIDECAR_TOPICS)" -}}
{{- end -}}
{{- if and (eq $s.kafka.groupProtocol "consumer") $s.kafka.assignmentStrategy -}}
{{- fail "sidecar.kafka.assignmentStrategy applies to groupProtocol=classic only; with consumer (KIP-848) the broker assigns" -}}
{{- end -}}
{{- if lt (int64 $s.drainTimeoutMs) (int64 $s.revokeTimeoutMs) -}}
{{- fail (printf "sidecar.drainTimeoutMs (%d) must be at least sidecar.revokeTimeoutMs (%d): the drain waits for the revoke barrier" (int64 $s.drainTimeoutMs) (int64 $s.revokeTimeoutMs)) -}}
{{- end -}}
{{- if and $c.values.app.preStop.enabled (not $c.values.app.preStop.command) (not $c.values.app.sidecarEnv) -}}
{{- fail "app.preStop's default command reads SIDECAR_API_TOKEN: keep app.sidecarEnv=true or set app.preStop.command" -}}
{{- end -}}
{{- end -}}

{{- /* Environment of the sidecar container. */ -}}
{{- define "rebalance-sidecar.env" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $s := $c.values.sidecar -}}
- name: SIDECAR_API_HOST
  value: "0.0.0.0"
- name: SIDECAR_API_PORT
  value: {{ int64 $s.port | quote }}
- name: SIDECAR_API_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rebalance-sidecar.tokenSecretName" . }}
      key: {{ include "rebalance-sidecar.tokenSecretKey" . }}
- name: SIDECAR_DATA_DIR
  value: {{ $s.dataDir | quote }}
- name: SIDECAR_BOOTSTRAP_SERVERS
  value: {{ $s.kafka.bootstrapServers | quote }}
- name: SIDECAR_GROUP_ID
  value: {{ $s.kafka.groupId | quote }}
- name: SIDECAR_TOPICS
  value: {{ join "," $s.kafka.topics | quote }}
- name: SIDECAR_GROUP_PROTOCOL
  value: {{ $s.kafka.groupProtocol | quote }}
{{- with $s.kafka.assignmentStrategy }}
- name: SIDECAR_ASSIGNMENT_STRATEGY
  value: {{ . | quote }}
{{- end }}
- name: SIDECAR_REVOKE_TIMEOUT_MS
  value: {{ int64 $s.revokeTimeoutMs | quote }}
- name: SIDECAR_DRAIN_TIMEOUT_MS
  value: {{ int64 $s.drainTimeoutMs | quote }}
{{- with $s.eventsTopic }}
- name: SIDECAR_EVENTS_TOPIC
  value: {{ . | quote }}
{{- end }}
{{- if include "rebalance-sidecar.staticMembership" . }}
- name: SIDECAR_GROUP_INSTANCE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- if include "rebalance-sidecar.hasWebhooks" . }}
- name: SIDECAR_WEBHOOKS
  valueFrom:
    secretKeyRef:
      name: {{ include "rebalance-sidecar.webhooksSecretName" . }}
      key: {{ include "rebalance-sidecar.webhooksSecretKey" . }}
{{- end }}
{{- range $property, $value := $s.kafka.properties }}
- name: {{ include "rebalance-sidecar.kafkaEnvName" $property }}
  value: {{ include "rebalance-sidecar.scalar" $value | quote }}
{{- end }}
{{- range $s.kafka.secretProperties }}
- name: {{ include "rebalance-sidecar.kafkaEnvName" .property }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .key }}
{{- end }}
{{- with $s.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "rebalance-sidecar.httpProbe" -}}
{{- $p := .probe -}}
httpGet:
  path: {{ $p.path }}
  port: sidecar-http
periodSeconds: {{ int64 $p.periodSeconds }}
timeoutSeconds: {{ int64 $p.timeoutSeconds }}
failureThreshold: {{ int64 $p.failureThreshold }}
{{- end -}}

{{- /*
POST /drain from inside a container, with curl, wget or python3 (whichever the
image has). Waits for the drain's own deadline plus 10 s of slack.
*/ -}}
{{- define "rebalance-sidecar.drainScript" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $wait := add (int64 (include "rebalance-sidecar.drainSeconds" .)) 10 -}}
url="http://127.0.0.1:{{ int64 $c.values.sidecar.port }}/drain"
auth="Authorization: Bearer ${SIDECAR_API_TOKEN}"
if command -v curl >/dev/null 2>&1; then
  exec curl -fsS -m {{ $wait }} -X POST -H "$auth" "$url"
elif command -v wget >/dev/null 2>&1; then
  exec wget -q -O /dev/null -T {{ $wait }} --header "$auth" --post-data "" "$url"
elif command -v python3 >/dev/null 2>&1; then
  exec python3 -c "import os, urllib.request as r; r.urlopen(r.Request('$url', data=b'', headers={'Authorization': 'Bearer ' + os.environ['SIDECAR_API_TOKEN']}), timeout={{ $wait }})"
fi
echo "rebalance-sidecar preStop: the app image has no curl, wget or python3; set app.preStop.command" >&2
exit 1
{{- end -}}

{{- /* The app container's lifecycle: preStop drains the sidecar. */ -}}
{{- define "rebalance-sidecar.appLifecycle" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if $c.values.app.preStop.enabled -}}
preStop:
  exec:
    command:
      {{- if $c.values.app.preStop.command }}
      {{- toYaml $c.values.app.preStop.command | nindent 6 }}
      {{- else }}
      - sh
      - -c
      - |
        {{- include "rebalance-sidecar.drainScript" . | nindent 8 }}
      {{- end }}
{{- end -}}
{{- end -}}

{{- /* Env items for the app container. */ -}}
{{- define "rebalance-sidecar.appEnv" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if $c.values.app.sidecarEnv -}}
- name: SIDECAR_URL
  value: {{ printf "http://127.0.0.1:%d" (int64 $c.values.sidecar.port) | quote }}
- name: SIDECAR_API_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rebalance-sidecar.tokenSecretName" . }}
      key: {{ include "rebalance-sidecar.tokenSecretKey" . }}
{{- end -}}
{{- end -}}

{{- /* The sidecar container, as one list item. */ -}}
{{- define "rebalance-sidecar.container" -}}
{{- include "rebalance-sidecar.validate" . -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $s := $c.values.sidecar -}}
- name: {{ $s.name }}
  image: {{ include "rebalance-sidecar.image" . | quote }}
  imagePullPolicy: {{ $s.image.pullPolicy }}
  {{- if eq $s.mode "native" }}
  # A native sidecar: started before, and stopped after, the app containers.
  restartPolicy: Always
  {{- end }}
  args:
    - run
  ports:
    - name: sidecar-http
      containerPort: {{ int64 $s.port }}
      protocol: TCP
  env:
    {{- include "rebalance-sidecar.env" . | nindent 4 }}
  {{- with $s.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $s.probes.startup.enabled }}
  startupProbe:
    {{- include "rebalance-sidecar.httpProbe" (dict "probe" $s.probes.startup) | nindent 4 }}
  {{- end }}
  {{- if $s.probes.liveness.enabled }}
  livenessProbe:
    {{- include "rebalance-sidecar.httpProbe" (dict "probe" $s.probes.liveness) | nindent 4 }}
  {{- end }}
  {{- if $s.probes.readiness.enabled }}
  readinessProbe:
    {{- include "rebalance-sidecar.httpProbe" (dict "probe" $s.probes.readiness) | nindent 4 }}
  {{- end }}
  {{- if and (eq $s.mode "classic") $c.values.app.preStop.enabled }}
  # Classic sidecars get SIGTERM together with the app: wait for the same drain
  # (POST /drain is idempotent) so the sidecar outlives the revoke delivery.
  lifecycle:
    preStop:
      exec:
        command:
          - python
          - -c
          - {{ printf "import os, urllib.request as r; r.urlopen(r.Request('http://127.0.0.1:%d/drain', data=b'', headers={'Authorization': 'Bearer ' + os.environ['SIDECAR_API_TOKEN']}), timeout=%d)" (int64 $s.port) (add (int64 (include "rebalance-sidecar.drainSeconds" .)) 10) | quote }}
  {{- end }}
  {{- with $s.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $s.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: rebalance-sidecar-data
      mountPath: {{ $s.dataDir }}
    - name: rebalance-sidecar-tmp
      mountPath: /tmp
    {{- with $s.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{- define "rebalance-sidecar.initContainers" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if eq $c.values.sidecar.mode "native" -}}
{{- include "rebalance-sidecar.container" . -}}
{{- end -}}
{{- end -}}

{{- define "rebalance-sidecar.containers" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if eq $c.values.sidecar.mode "classic" -}}
{{- include "rebalance-sidecar.container" . -}}
{{- end -}}
{{- end -}}

{{- /* Pod volumes for the sidecar (the data volume is a PVC for persistent StatefulSets). */ -}}
{{- define "rebalance-sidecar.volumes" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if not (include "rebalance-sidecar.persistentData" .) }}
- name: rebalance-sidecar-data
  emptyDir:
    {{- with $c.values.sidecar.dataVolume.sizeLimit }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end }}
- name: rebalance-sidecar-tmp
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
{{- end -}}
