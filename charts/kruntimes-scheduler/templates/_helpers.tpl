{{/* The object names are fixed, as in deploy/: one scheduler per cluster, reachable by the names the
docs and the alerts' runbooks use (Lease kruntimes-scheduler, ClusterRole kruntimes:scheduler). */}}

{{- define "kruntimes-scheduler.selectorLabels" -}}
app.kubernetes.io/name: kruntimes-scheduler
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "kruntimes-scheduler.labels" -}}
{{ include "kruntimes-scheduler.selectorLabels" . }}
app.kubernetes.io/part-of: kruntimes
{{- end }}

{{/* The port of a bind address (":8080", "0.0.0.0:8080", "[::]:8080"); empty when it names none ("0"). */}}
{{- define "kruntimes-scheduler.port" -}}
{{- if contains ":" . }}{{ regexReplaceAll "^.*:" . "" }}{{ end }}
{{- end }}

{{- define "kruntimes-scheduler.metricsPort" -}}
{{- include "kruntimes-scheduler.port" (toString .Values.scheduler.metricsBindAddress) }}
{{- end }}

{{- define "kruntimes-scheduler.probePort" -}}
{{- $port := include "kruntimes-scheduler.port" (toString .Values.scheduler.probeBindAddress) }}
{{- if not $port }}
{{- fail "scheduler.probeBindAddress must name a port (\":8081\"): the kubelet's probes use it" }}
{{- end }}
{{- $port }}
{{- end }}

{{- define "kruntimes-scheduler.image" -}}
{{- $s := .Values.scheduler }}
{{- $ref := $s.image }}
{{- if $s.imageRegistry }}{{ $ref = printf "%s/%s" (trimSuffix "/" $s.imageRegistry) $ref }}{{ end }}
{{- if not (or (contains "@" $s.image) (regexMatch ":[^/]+$" $s.image)) }}
{{- $ref = printf "%s:%s" $ref (toString ($s.imageTag | default .Chart.AppVersion)) }}
{{- end }}
{{- $ref }}
{{- end }}

{{/* The SchedulerConfiguration file of scheduler.config, apiVersion and kind filled in. */}}
{{- define "kruntimes-scheduler.config" -}}
{{- merge (dict) .Values.scheduler.config (dict "apiVersion" "kruntimes.io/v1alpha1" "kind" "SchedulerConfiguration") | toYaml }}
{{- end }}
