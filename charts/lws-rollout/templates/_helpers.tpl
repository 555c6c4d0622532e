{{- define "lws-rollout.name" -}}{{ .Release.Name }}{{- end -}}
{{/* Names the manager is told by flag, so RBAC can name them in resourceNames. */}}
{{- define "lws-rollout.webhookConfiguration" -}}{{ .Release.Name }}{{- end -}}
{{- define "lws-rollout.webhookSecret" -}}{{ .Release.Name }}-webhook-cert{{- end -}}
{{- define "lws-rollout.lease" -}}{{ .Release.Name }}{{- end -}}
{{- define "lws-rollout.labels" -}}
app.kubernetes.io/name: lws-rollout
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "lws-rollout.selector" -}}
app.kubernetes.io/name: lws-rollout
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
