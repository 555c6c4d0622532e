{{- define "lws-rollout.name" -}}{{ .Release.Name }}{{- end -}}
{{- define "lws-rollout.labels" -}}
app.kubernetes.io/name: lws-rollout
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
{{- define "lws-rollout.selector" -}}
app.kubernetes.io/name: lws-rollout
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
