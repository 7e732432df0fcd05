{{/* Names and labels shared by every template. */}}

{{- define "gpusched.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpusched.fullname" -}}
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

{{- define "gpusched.agentName" -}}
{{- printf "%s-agent" (include "gpusched.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpusched.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gpusched.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpusched
{{- end }}

{{- define "gpusched.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpusched.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "gpusched.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpusched.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "gpusched.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpusched.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpusched.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Where the leader-election Lease lives: the config's leaseNamespace, else the release's. */}}
{{- define "gpusched.leaseNamespace" -}}
{{- default .Release.Namespace .Values.config.operator.leaderElection.leaseNamespace }}
{{- end }}
