{{/*
Where the serving certificate comes from (values certificates.mode; certManager.enabled: true
still means cert-manager): self, cert-manager or manual. docs/certificates.md.
*/}}
{{- define "podium.certMode" -}}
{{- if .Values.certManager.enabled -}}
cert-manager
{{- else -}}
{{- .Values.certificates.mode -}}
{{- end -}}
{{- end -}}
