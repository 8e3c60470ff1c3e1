{{/* Names: at most 63 characters (a DNS label); `nri-sla` for a release named nri-sla. */}}
{{- define "nri-sla.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nri-sla.fullname" -}}
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

{{- define "nri-sla.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What the DaemonSet selects its pods by: never changes across upgrades. */}}
{{- define "nri-sla.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nri-sla.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nri-sla.labels" -}}
helm.sh/chart: {{ include "nri-sla.chart" . }}
{{ include "nri-sla.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "nri-sla.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The node config: `config`, with the chart's `events.enabled` as its events.enabled. */}}
{{- define "nri-sla.config" -}}
{{- $config := deepCopy .Values.config }}
{{- $events := deepCopy (default (dict) $config.events) }}
{{- $_ := set $events "enabled" .Values.events.enabled }}
{{- $_ := set $config "events" $events }}
{{- toYaml $config }}
{{- end }}
