{{- /*
Named templates.

Public (other charts include these to inject the sidecar; see README.md):
  rebalance-sidecar.container        the sidecar container, as one list item
  rebalance-sidecar.initContainers   the container when sidecar.mode=native, else nothing
  rebalance-sidecar.containers       the container when sidecar.mode=classic, else nothing
  rebalance-sidecar.volumes          the pod volumes the sidecar needs (list items)
  rebalance-sidecar.appEnv           env items for the app: SIDECAR_URL, SIDECAR_BOOTSTRAP_SERVERS,
                                     SIDECAR_GROUP_ID (+ SIDECAR_API_TOKEN)
  rebalance-sidecar.appLifecycle     the app container's `lifecycle` (preStop drain, httpGet)
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

{{- /*
The name of one of this chart's Services: the full name and a suffix, as a DNS-1035
label. Helm allows dots in a release name (team.orders), a Service name does not: they
become dashes here only, so that no other object is renamed on upgrade (every object
that accepts dots keeps the name it had). A name that cannot begin with a letter
(release 1orders) is refused with what to set. Takes (dict "top" $ "suffix" "-x").
*/ -}}
{{- define "rebalance-sidecar.serviceName" -}}
{{- $name := printf "%s%s" (include "rebalance-sidecar.fullname" .top) .suffix | replace "." "-" -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "the Service name %q is not a DNS-1035 label (a lower-case letter first, then letters, digits and dashes): set fullnameOverride to a name that begins with a letter" $name) -}}
{{- end -}}
{{- $name -}}
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

{{- /*
The registry prefix of an image: global.imageRegistry (the subchart's merged
globals, else the parent's), else the image's own registry.
*/ -}}
{{- define "rebalance-sidecar.registry" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" .ctx "out" $c) -}}
{{- $global := (get $c.values "global" | default dict).imageRegistry | default ((get $c.top.Values "global" | default dict).imageRegistry) -}}
{{- with ($global | default .image.registry) -}}{{ trimSuffix "/" . }}/{{- end -}}
{{- end -}}

{{- define "rebalance-sidecar.image" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $img := $c.values.sidecar.image -}}
{{- $repo := printf "%s%s" (include "rebalance-sidecar.registry" (dict "ctx" . "image" $img)) $img.repository -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (toString ($img.tag | default $c.top.Chart.AppVersion)) -}}
{{- end -}}
{{- end -}}

{{- define "rebalance-sidecar.appImage" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $img := $c.values.app.image -}}
{{- printf "%s%s:%s" (include "rebalance-sidecar.registry" (dict "ctx" . "image" $img)) $img.repository (toString $img.tag) -}}
{{- end -}}

{{- define "rebalance-sidecar.serviceAccountName" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $sa := $c.values.serviceAccount -}}
{{- if $sa.create -}}
{{- $sa.name | default (include "rebalance-sidecar.fullname" .) -}}
{{- else -}}
{{- $sa.name -}}
{{- end -}}
{{- end -}}

{{- /* "true" when the control API has a bearer token (sidecar.token). */ -}}
{{- define "rebalance-sidecar.hasToken" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if or $c.values.sidecar.token.existingSecret $c.values.sidecar.token.value -}}true{{- end -}}
{{- end -}}

{{- /* "true" when the control API binds a loopback address only. */ -}}
{{- define "rebalance-sidecar.apiOnLoopback" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $host := $c.values.sidecar.api.host -}}
{{- if or (hasPrefix "127." $host) (eq $host "localhost") (eq $host "::1") -}}true{{- end -}}
{{- end -}}

{{- /*
SIDECAR_DRAIN_TOKEN, and the X-Drain-Token header of the preStop hook. A
preStop httpGet carries its headers in the pod spec (they cannot come from a
Secret), so the value is never more secret than the pod spec: derived from
names by default, which keeps every render identical and stops only callers that
do not know the release; docs/kubernetes.md ("Who can drain") says how to tighten it.
*/ -}}
{{- define "rebalance-sidecar.drainToken" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $c.values.sidecar.drainToken | default (printf "rebalance-sidecar/drain/%s/%s/%s" $c.top.Release.Namespace (include "rebalance-sidecar.fullname" .) $c.values.sidecar.kafka.groupId | sha256sum | trunc 40) -}}
{{- end -}}

{{- /* The assignment strategy actually used: classic protocol only; empty = cooperative-sticky. */ -}}
{{- define "rebalance-sidecar.assignmentStrategy" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if eq $c.values.sidecar.kafka.groupProtocol "classic" -}}
{{- $c.values.sidecar.kafka.assignmentStrategy | default "cooperative-sticky" -}}
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

{{- /*
After a drain no SIGTERM followed (only the app container restarted): liveness
fails this long after the drain ended. Default: the grace period + 30 s, so the
termination a drain starts always ends first.
*/ -}}
{{- define "rebalance-sidecar.drainedRestartAfterMs" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $set := $c.values.sidecar.drainedRestartAfterMs -}}
{{- if kindIs "invalid" $set -}}
{{- mul (add (int64 (include "rebalance-sidecar.terminationGracePeriodSeconds" .)) 30) 1000 -}}
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

{{- /*
A Kubernetes quantity of bytes (256Mi, 1Gi, 500M, 1.5Gi, 1e9, 268435456) in bytes,
rounded down. Takes (dict "key" <value's name, for the error> "value" <quantity>);
fails on anything else (m, u and n too: 256m is 0.256 bytes).
*/ -}}
{{- define "rebalance-sidecar.quantityBytes" -}}
{{- $q := include "rebalance-sidecar.scalar" .value -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 "E" 1000000000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "Ei" 1152921504606846976 -}}
{{- $number := regexFind `^[0-9]+(\.[0-9]+)?` $q -}}
{{- $suffix := trimPrefix $number $q -}}
{{- $scale := 1.0 -}}
{{- if not $number -}}
{{- fail (printf "%s=%s is not a quantity of bytes: give a number with an optional suffix Ki, Mi, Gi, Ti, k, M, G, T (256Mi, 1Gi, 500M)" .key $q) -}}
{{- else if hasKey $units $suffix -}}
{{- $scale = get $units $suffix -}}
{{- else if regexMatch `^[eE][0-9]{1,2}$` $suffix -}}
{{- range until (int (trimPrefix "e" (lower $suffix))) -}}{{- $scale = mulf $scale 10 -}}{{- end -}}
{{- else -}}
{{- fail (printf "%s=%s is not a quantity of bytes: the suffix %q is not one of Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E (not m: 256m would be 0.256 bytes)" .key $q $suffix) -}}
{{- end -}}
{{- $bytes := floor (mulf (float64 $number) $scale) -}}
{{- /* Past int64 (8Ei, 1e19) Go's conversion wraps to a negative number: no budget at all. */ -}}
{{- if ge $bytes 9.223372036854775807e18 -}}
{{- fail (printf "%s=%s is more bytes than the chart can count (9.2e18)" .key $q) -}}
{{- end -}}
{{- int64 $bytes -}}
{{- end -}}

{{- /*
SIDECAR_JOURNAL_MAX_BYTES: sidecar.journalMaxBytes when given (0: no limit), else
half the data volume (the emptyDir's sizeLimit, or the PVC's size with StatefulSet
persistence); empty when neither says a size. Half, because the volume also holds
what retention by size does not bound: the WAL (4 MiB, more while a reader holds
it), the events appended between two prunes, and the events no webhook or fleet
producer has taken yet, which are never dropped. An emptyDir past its sizeLimit
gets the pod evicted, journal and all (docs/kubernetes.md, "The journal's volume").
*/ -}}
{{- define "rebalance-sidecar.journalMaxBytes" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $s := $c.values.sidecar -}}
{{- $key := "sidecar.dataVolume.sizeLimit" -}}
{{- $size := $s.dataVolume.sizeLimit -}}
{{- if include "rebalance-sidecar.persistentData" . -}}
{{- $key = "workload.statefulSet.persistence.size" -}}
{{- $size = $c.values.workload.statefulSet.persistence.size -}}
{{- end -}}
{{- $volume := 0 -}}
{{- if not (kindIs "invalid" $size) -}}{{- if ne (toString $size) "" -}}
{{- $volume = int64 (include "rebalance-sidecar.quantityBytes" (dict "key" $key "value" $size)) -}}
{{- end -}}{{- end -}}
{{- $set := $s.journalMaxBytes -}}
{{- if not (kindIs "invalid" $set) -}}
{{- $set = include "rebalance-sidecar.scalar" $set -}}
{{- if not (regexMatch `^[0-9]+$` $set) -}}
{{- fail (printf "sidecar.journalMaxBytes=%s is not a whole number of bytes (null: half the data volume; 0: no limit)" $set) -}}
{{- end -}}
{{- $set = int64 $set -}}
{{- if and (gt $set 0) (lt $set 1048576) -}}
{{- fail (printf "sidecar.journalMaxBytes=%d is below 1 MiB (1048576): give at least that, 0 for no limit, or null for half the data volume" $set) -}}
{{- end -}}
{{- if and (gt $volume 0) (ge $set $volume) -}}
{{- fail (printf "sidecar.journalMaxBytes=%d is not below %s (%d bytes): the journal would fill its volume before retention cut it (an emptyDir over its sizeLimit gets the pod evicted); leave it null for half" $set $key $volume) -}}
{{- end -}}
{{- $set -}}
{{- else if gt $volume 0 -}}
{{- $half := div $volume 2 -}}
{{- if lt $half 1048576 -}}
{{- fail (printf "%s=%s leaves the journal less than 1 MiB (half the volume): give the volume at least 2Mi, or set sidecar.journalMaxBytes" $key (include "rebalance-sidecar.scalar" $size)) -}}
{{- end -}}
{{- if gt $half 1125899906842624 -}}
{{- fail (printf "%s=%s: half of it is more than the sidecar takes (1 PiB); set sidecar.journalMaxBytes" $key (include "rebalance-sidecar.scalar" $size)) -}}
{{- end -}}
{{- $half -}}
{{- end -}}
{{- end -}}

{{- /* librdkafka property name -> SIDECAR_KAFKA_ variable ("_" -> "__", "." -> "_"). */ -}}
{{- define "rebalance-sidecar.kafkaEnvName" -}}
{{- printf "SIDECAR_KAFKA_%s" (. | replace "_" "__" | replace "." "_" | upper) -}}
{{- end -}}

{{- /* A Prometheus duration (1m30s, 500ms, 1h) in milliseconds. */ -}}
{{- define "rebalance-sidecar.durationMs" -}}
{{- $units := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 -}}
{{- $total := int64 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" (toString .) -1 -}}
{{- $n := regexFind "^[0-9]+" . -}}
{{- $total = add $total (mul (int64 $n) (int64 (get $units (trimPrefix $n .)))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{- /*
Fails when a monitor's scrapeTimeout is longer than its interval: Prometheus
refuses such a scrape config. Takes (dict "key" "podMonitor" "monitor" <values>).
*/ -}}
{{- define "rebalance-sidecar.checkScrapeTimeout" -}}
{{- $m := .monitor -}}
{{- if and $m.interval $m.scrapeTimeout -}}
{{- if gt (int64 (include "rebalance-sidecar.durationMs" $m.scrapeTimeout)) (int64 (include "rebalance-sidecar.durationMs" $m.interval)) -}}
{{- fail (printf "monitoring.%s.scrapeTimeout=%s is longer than monitoring.%s.interval=%s: Prometheus refuses a scrape timeout greater than the scrape interval; lower scrapeTimeout or raise interval" .key $m.scrapeTimeout .key $m.interval) -}}
{{- end -}}
{{- end -}}
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
{{- if and (not (include "rebalance-sidecar.apiOnLoopback" .)) (not (include "rebalance-sidecar.hasToken" .)) -}}
{{- fail (printf "sidecar.api.host=%s is not loopback: set sidecar.token.existingSecret (or sidecar.token.value); the sidecar refuses a non-loopback API without a token" $s.api.host) -}}
{{- end -}}
{{- if eq (int64 $s.api.port) (int64 $s.admin.port) -}}
{{- fail (printf "sidecar.api.port and sidecar.admin.port are both %d" (int64 $s.api.port)) -}}
{{- end -}}
{{- range $c.values.app.ports -}}
{{- if has (int64 .containerPort) (list (int64 $s.api.port) (int64 $s.admin.port)) -}}
{{- fail (printf "app.ports: containerPort %d is taken by the sidecar (sidecar.api.port %d, sidecar.admin.port %d): the containers share the pod's network" (int64 .containerPort) (int64 $s.api.port) (int64 $s.admin.port)) -}}
{{- end -}}
{{- end -}}
{{- /*
Port names are looked up in every container of the pod, regular containers (the
app) first: the metrics and `helm test` Services' targetPort, the PodMonitor's port
and a NetworkPolicy rule naming an app port would all pick the app's port of the
same name, and networkPolicy.allowAppPorts would open the sidecar's admin port
(and /drain) to everyone.
*/ -}}
{{- $sidecarPorts := list "admin" -}}
{{- if not (include "rebalance-sidecar.apiOnLoopback" .) -}}
{{- $sidecarPorts = append $sidecarPorts "api" -}}
{{- end -}}
{{- range $c.values.app.ports -}}
{{- if and .name (has (toString .name) $sidecarPorts) -}}
{{- fail (printf "app.ports: the name %s is the sidecar's port (container port names are looked up across the pod, the app's first: the metrics Service, the PodMonitor, the helm test and a NetworkPolicy naming it would reach the app's port, or open the sidecar's); rename the app's port" (toString .name)) -}}
{{- end -}}
{{- end -}}
{{- /*
A variable whose value the chart also uses elsewhere must not come again in
sidecar.env: the sidecar would run with the sidecar.env value while the preStop hook's
X-Drain-Token header, the grace period, the probes, the Services and the volume mount
keep the chart's (a drain token from a Secret, say, makes every drain a 401 that the
kubelet does not report). Any other variable the chart sets may be given again, with a
valueFrom too (bootstrap servers from a ConfigMap, the admin host from status.podIP):
it replaces the chart's entry (rebalance-sidecar.env).
*/ -}}
{{- $derived := list "SIDECAR_API_HOST" "SIDECAR_API_PORT" "SIDECAR_ADMIN_PORT" "SIDECAR_DRAIN_TOKEN" "SIDECAR_DRAIN_TIMEOUT_MS" "SIDECAR_DRAINED_RESTART_AFTER_MS" "SIDECAR_REVOKE_TIMEOUT_MS" "SIDECAR_DATA_DIR" -}}
{{- range $s.env -}}
{{- if has .name $derived -}}
{{- fail (printf "sidecar.env sets %s, which the chart sets from its values and also uses elsewhere (the drain hook, the grace period, the probes, the Services or the volume): the sidecar would run with the sidecar.env value while those follow the chart's; set it through the chart's value instead (a drain token from a Secret cannot work: the preStop hook's header is in the pod spec)" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /*
Secrets the sidecar reads as files: one projected volume at
/etc/rebalance-sidecar/secrets, one source per Secret, each key at a fixed path
(kafka/..., webhook/...). Takes the usual argument; renders the projected
volume's `sources` list, or nothing when no Secret is configured. The kubelet
updates a projected volume in place when a Secret changes (no subPath): the
sidecar reloads renewed webhook certificates; librdkafka reads its files when it
connects.
*/ -}}
{{- define "rebalance-sidecar.secretSources" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $k := $c.values.sidecar.kafka -}}
{{- $w := $c.values.sidecar.webhookTls -}}
{{- with $k.existingSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $k.existingSecretKey }}
        path: kafka/sasl-password
{{- end }}
{{- with $k.tls.caSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $k.tls.caSecretKey }}
        path: kafka/ca.crt
{{- end }}
{{- with $k.tls.clientSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $k.tls.certificateKey }}
        path: kafka/user.crt
      - key: {{ $k.tls.keyKey }}
        path: kafka/user.key
      {{- with $k.tls.keyPasswordKey }}
      - key: {{ . }}
        path: kafka/user.key-password
      {{- end }}
{{- end }}
{{- with $k.oauthbearer.existingSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $k.oauthbearer.clientSecretKey }}
        path: kafka/oauthbearer-client-secret
{{- end }}
{{- if and $w.existingSecret (or $w.caKey $w.certificateKey) }}
- secret:
    name: {{ $w.existingSecret }}
    items:
      {{- with $w.caKey }}
      - key: {{ . }}
        path: webhook/ca.crt
      {{- end }}
      {{- with $w.certificateKey }}
      - key: {{ . }}
        path: webhook/tls.crt
      {{- end }}
      {{- with $w.keyKey }}
      - key: {{ . }}
        path: webhook/tls.key
      {{- end }}
      {{- with $w.keyPasswordKey }}
      - key: {{ . }}
        path: webhook/key-password
      {{- end }}
{{- end }}
{{- end -}}

{{- /* The variables that point the sidecar at the files of rebalance-sidecar.secretSources. */ -}}
{{- define "rebalance-sidecar.secretFileEnv" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $k := $c.values.sidecar.kafka -}}
{{- $w := $c.values.sidecar.webhookTls -}}
{{- $dir := "/etc/rebalance-sidecar/secrets" -}}
{{- if $k.existingSecret }}
- name: SIDECAR_KAFKA_SASL_PASSWORD_FILE
  value: {{ printf "%s/kafka/sasl-password" $dir | quote }}
{{- end }}
{{- if $k.tls.caSecret }}
- name: SIDECAR_KAFKA_SSL_CA_LOCATION
  value: {{ printf "%s/kafka/ca.crt" $dir | quote }}
{{- end }}
{{- if $k.tls.clientSecret }}
- name: SIDECAR_KAFKA_SSL_CERTIFICATE_LOCATION
  value: {{ printf "%s/kafka/user.crt" $dir | quote }}
- name: SIDECAR_KAFKA_SSL_KEY_LOCATION
  value: {{ printf "%s/kafka/user.key" $dir | quote }}
{{- if $k.tls.keyPasswordKey }}
- name: SIDECAR_KAFKA_SSL_KEY_PASSWORD_FILE
  value: {{ printf "%s/kafka/user.key-password" $dir | quote }}
{{- end }}
{{- end }}
{{- if $k.oauthbearer.existingSecret }}
- name: SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE
  value: {{ printf "%s/kafka/oauthbearer-client-secret" $dir | quote }}
{{- end }}
{{- if $w.existingSecret }}
{{- if $w.caKey }}
- name: SIDECAR_WEBHOOK_TLS_CA_LOCATION
  value: {{ printf "%s/webhook/ca.crt" $dir | quote }}
{{- end }}
{{- if $w.certificateKey }}
- name: SIDECAR_WEBHOOK_TLS_CERTIFICATE_LOCATION
  value: {{ printf "%s/webhook/tls.crt" $dir | quote }}
{{- end }}
{{- if $w.keyKey }}
- name: SIDECAR_WEBHOOK_TLS_KEY_LOCATION
  value: {{ printf "%s/webhook/tls.key" $dir | quote }}
{{- end }}
{{- if $w.keyPasswordKey }}
- name: SIDECAR_WEBHOOK_TLS_KEY_PASSWORD_FILE
  value: {{ printf "%s/webhook/key-password" $dir | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- /*
Settings that hold a secret value: the chart never renders one into an env value
(anyone who can read the pod spec, or a GitOps repository, would read it). They
come from a Secret: the file-mounted values above, or secretProperties.
*/ -}}
{{- define "rebalance-sidecar.validateSecrets" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $s := $c.values.sidecar -}}
{{- $secretProperties := dict "sasl.password" "sidecar.kafka.existingSecret" "sasl.oauthbearer.client.secret" "sidecar.kafka.oauthbearer.existingSecret" "ssl.key.password" "sidecar.kafka.tls.keyPasswordKey" "ssl.key.pem" "sidecar.kafka.tls.clientSecret" "ssl.keystore.password" "sidecar.kafka.secretProperties" "ssl.truststore.password" "sidecar.kafka.secretProperties" "sasl.jaas.config" "sidecar.kafka.secretProperties" -}}
{{- range $property, $_ := $s.kafka.properties -}}
{{- if hasKey $secretProperties $property -}}
{{- fail (printf "sidecar.kafka.properties.%s is a secret: the chart would render it into the pod spec; put it in a Secret and use %s" $property (get $secretProperties $property)) -}}
{{- end -}}
{{- end -}}
{{- $fromFiles := dict "sasl.password" $s.kafka.existingSecret "ssl.ca.location" $s.kafka.tls.caSecret "ssl.certificate.location" $s.kafka.tls.clientSecret "ssl.key.location" $s.kafka.tls.clientSecret "sasl.oauthbearer.client.secret" $s.kafka.oauthbearer.existingSecret -}}
{{- range $s.kafka.secretProperties -}}
{{- if get $fromFiles .property -}}
{{- fail (printf "sidecar.kafka.secretProperties sets %s, which the chart already reads from a mounted Secret: give it once" .property) -}}
{{- end -}}
{{- end -}}
{{- range $property, $_ := $s.kafka.properties -}}
{{- if get $fromFiles $property -}}
{{- fail (printf "sidecar.kafka.properties.%s is set, and the chart sets it from a mounted Secret: give it once" $property) -}}
{{- end -}}
{{- end -}}
{{- $secretVariables := list "SIDECAR_API_TOKEN" "SIDECAR_WEBHOOKS" "SIDECAR_KAFKA_SASL_PASSWORD" "SIDECAR_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET" "SIDECAR_KAFKA_SSL_KEY_PASSWORD" "SIDECAR_KAFKA_SSL_KEY_PEM" "SIDECAR_KAFKA_SSL_KEYSTORE_PASSWORD" "SIDECAR_KAFKA_SASL_JAAS_CONFIG" "SIDECAR_WEBHOOK_TLS_KEY_PASSWORD" -}}
{{- range $s.env -}}
{{- if and (has .name $secretVariables) (hasKey . "value") -}}
{{- fail (printf "sidecar.env gives %s a value: a secret in the pod spec; use valueFrom.secretKeyRef, or the chart's Secret-backed values (docs/kubernetes.md)" .name) -}}
{{- end -}}
{{- end -}}
{{- if and $s.webhookTls.existingSecret (not (or $s.webhookTls.caKey $s.webhookTls.certificateKey)) -}}
{{- fail "sidecar.webhookTls.existingSecret is set but neither caKey nor certificateKey: nothing to mount" -}}
{{- end -}}
{{- if and $s.webhookTls.keyKey (not $s.webhookTls.certificateKey) -}}
{{- fail "sidecar.webhookTls.keyKey needs sidecar.webhookTls.certificateKey (a key without its certificate)" -}}
{{- end -}}
{{- end -}}

{{- /* The sidecar's variables that the chart sets from its values (not sidecar.env). */ -}}
{{- define "rebalance-sidecar.chartEnv" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $s := $c.values.sidecar -}}
- name: SIDECAR_API_HOST
  value: {{ $s.api.host | quote }}
- name: SIDECAR_API_PORT
  value: {{ int64 $s.api.port | quote }}
{{- if include "rebalance-sidecar.hasToken" . }}
- name: SIDECAR_API_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rebalance-sidecar.tokenSecretName" . }}
      key: {{ include "rebalance-sidecar.tokenSecretKey" . }}
{{- end }}
- name: SIDECAR_ADMIN_HOST
  value: {{ $s.admin.host | default "0.0.0.0" | quote }}
- name: SIDECAR_ADMIN_PORT
  value: {{ int64 $s.admin.port | quote }}
- name: SIDECAR_DRAIN_TOKEN
  value: {{ include "rebalance-sidecar.drainToken" . | quote }}
{{- if $s.readyWithoutGroup }}
- name: SIDECAR_READY_WITHOUT_GROUP
  value: "true"
{{- end }}
- name: SIDECAR_DATA_DIR
  value: {{ $s.dataDir | quote }}
{{- with include "rebalance-sidecar.journalMaxBytes" . }}
- name: SIDECAR_JOURNAL_MAX_BYTES
  value: {{ . | quote }}
{{- end }}
- name: SIDECAR_BOOTSTRAP_SERVERS
  value: {{ $s.kafka.bootstrapServers | quote }}
- name: SIDECAR_GROUP_ID
  value: {{ $s.kafka.groupId | quote }}
- name: SIDECAR_TOPICS
  value: {{ join "," $s.kafka.topics | quote }}
- name: SIDECAR_GROUP_PROTOCOL
  value: {{ $s.kafka.groupProtocol | quote }}
{{- with include "rebalance-sidecar.assignmentStrategy" . }}
- name: SIDECAR_ASSIGNMENT_STRATEGY
  value: {{ . | quote }}
{{- end }}
- name: SIDECAR_REVOKE_TIMEOUT_MS
  value: {{ int64 $s.revokeTimeoutMs | quote }}
- name: SIDECAR_DRAIN_TIMEOUT_MS
  value: {{ int64 $s.drainTimeoutMs | quote }}
- name: SIDECAR_DRAINED_RESTART_AFTER_MS
  value: {{ include "rebalance-sidecar.drainedRestartAfterMs" . | quote }}
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
{{- include "rebalance-sidecar.secretFileEnv" . }}
{{- end -}}

{{- /* Environment of the sidecar container: the chart's variables, then sidecar.env (a
name given there replaces the chart's entry: one definition per name). */ -}}
{{- define "rebalance-sidecar.env" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- $given := list -}}
{{- range $c.values.sidecar.env }}{{ $given = append $given .name }}{{ end -}}
{{- $env := list -}}
{{- range (include "rebalance-sidecar.chartEnv" . | fromYamlArray) -}}
{{- if not (has .name $given) }}{{ $env = append $env . }}{{ end -}}
{{- end -}}
{{- toYaml (concat $env ($c.values.sidecar.env | default list)) }}
{{- end -}}

{{- define "rebalance-sidecar.httpProbe" -}}
{{- $p := .probe -}}
httpGet:
  path: {{ $p.path }}
  port: admin
periodSeconds: {{ int64 $p.periodSeconds }}
timeoutSeconds: {{ int64 $p.timeoutSeconds }}
failureThreshold: {{ int64 $p.failureThreshold }}
{{- end -}}

{{- /*
The drain hook: an httpGet the kubelet sends to the pod IP, so the container
needs no shell and no HTTP client. The port is a number because the kubelet
resolves a named port against the container that owns the hook (the app's),
not the sidecar's. The kubelet waits for the answer until the grace period ends.
*/ -}}
{{- define "rebalance-sidecar.drainHttpGet" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
httpGet:
  path: /drain
  port: {{ int64 $c.values.sidecar.admin.port }}
  scheme: HTTP
  httpHeaders:
    - name: X-Drain-Token
      value: {{ include "rebalance-sidecar.drainToken" . | quote }}
{{- end -}}

{{- /* The app container's lifecycle: preStop drains the sidecar. */ -}}
{{- define "rebalance-sidecar.appLifecycle" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if $c.values.app.preStop.enabled -}}
preStop:
  {{- if $c.values.app.preStop.command }}
  exec:
    command:
      {{- toYaml $c.values.app.preStop.command | nindent 6 }}
  {{- else }}
  {{- include "rebalance-sidecar.drainHttpGet" . | nindent 2 }}
  {{- end }}
{{- end -}}
{{- end -}}

{{- /*
Env items for the app container (app.sidecarEnv): SIDECAR_URL, the sidecar's
SIDECAR_BOOTSTRAP_SERVERS and SIDECAR_GROUP_ID (the app reads its partitions
itself with manual assignment; the group id is for reading committed offsets,
never for joining: the names say whose settings they are, where a plain GROUP_ID
would invite an app to subscribe as a competing member), and SIDECAR_API_TOKEN
when a token is configured. A name already in app.env is left to app.env.
*/ -}}
{{- define "rebalance-sidecar.appEnv" -}}
{{- $c := dict -}}{{- include "rebalance-sidecar.normalize" (dict "in" . "out" $c) -}}
{{- if $c.values.app.sidecarEnv -}}
{{- $taken := list -}}
{{- range $c.values.app.env -}}{{- $taken = append $taken .name -}}{{- end -}}
{{- $items := list (dict "name" "SIDECAR_URL" "value" (printf "http://127.0.0.1:%d" (int64 $c.values.sidecar.api.port))) -}}
{{- $items = append $items (dict "name" "SIDECAR_BOOTSTRAP_SERVERS" "value" (toString $c.values.sidecar.kafka.bootstrapServers)) -}}
{{- $items = append $items (dict "name" "SIDECAR_GROUP_ID" "value" (toString $c.values.sidecar.kafka.groupId)) -}}
{{- if include "rebalance-sidecar.hasToken" . -}}
{{- $ref := dict "name" (include "rebalance-sidecar.tokenSecretName" .) "key" (include "rebalance-sidecar.tokenSecretKey" .) -}}
{{- $items = append $items (dict "name" "SIDECAR_API_TOKEN" "valueFrom" (dict "secretKeyRef" $ref)) -}}
{{- end -}}
{{- $free := list -}}
{{- range $items -}}{{- if not (has .name $taken) -}}{{- $free = append $free . -}}{{- end -}}{{- end -}}
{{- with $free -}}{{- toYaml . -}}{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The sidecar container, as one list item. */ -}}
{{- define "rebalance-sidecar.container" -}}
{{- include "rebalance-sidecar.validate" . -}}
{{- include "rebalance-sidecar.validateSecrets" . -}}
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
    - name: admin
      containerPort: {{ int64 $s.admin.port }}
      protocol: TCP
    {{- if not (include "rebalance-sidecar.apiOnLoopback" .) }}
    - name: api
      containerPort: {{ int64 $s.api.port }}
      protocol: TCP
    {{- end }}
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
  # (the drain is idempotent) so the sidecar outlives the revoke delivery.
  lifecycle:
    preStop:
      {{- include "rebalance-sidecar.drainHttpGet" . | nindent 6 }}
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
    {{- if include "rebalance-sidecar.secretSources" . }}
    - name: rebalance-sidecar-secrets
      mountPath: /etc/rebalance-sidecar/secrets
      readOnly: true
    {{- end }}
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
{{- with include "rebalance-sidecar.secretSources" . }}
- name: rebalance-sidecar-secrets
  projected:
    # Read by the sidecar's user only through the pod's fsGroup (the chart's
    # default podSecurityContext): 0440, not world-readable.
    defaultMode: 288  # 0440
    sources:
      {{- . | nindent 6 }}
{{- end }}
{{- end -}}
