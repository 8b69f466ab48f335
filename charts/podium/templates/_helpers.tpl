{{/* podium's namespace: namespace.name, else the release's (helm install -n podium-system). */}}
{{- define "podium.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end -}}

{{/* The image reference; the tag defaults to the chart's appVersion. */}}
{{- define "podium.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The settings file podium reads with --config (the README's table). */}}
{{- define "podium.settings" -}}
{{- $managed := list "policy-mode" "policy_mode" "placement" "zone-chooser" "zone_chooser" "no-fit" "no_fit" "namespace-label" "namespace_label" "namespace-label-value" "namespace_label_value" "own-namespace" "own_namespace" -}}
{{- range $key, $_ := .Values.extraSettings -}}
{{- if has $key $managed -}}
{{- fail (printf "extraSettings.%s: set it with its own value (policyMode, placement, zoneChooser, noFit, namespaceLabel; the namespace is namespace.name)" $key) -}}
{{- end -}}
{{- end -}}
{{- $budget := index .Values.extraSettings "time-budget-seconds" | default (index .Values.extraSettings "time_budget_seconds") | default 2.0 -}}
{{- if ge (float64 $budget) (float64 .Values.timeoutSeconds) -}}
{{- fail (printf "extraSettings.time-budget-seconds (%v) must be below timeoutSeconds (%v): podium fails open with an audit record at its time budget, but past timeoutSeconds the apiserver gives up first and the pod is admitted unpinned with no record of why" $budget .Values.timeoutSeconds) -}}
{{- end -}}
policy-mode: {{ .Values.policyMode }}
placement: {{ .Values.placement }}
zone-chooser: {{ .Values.zoneChooser }}
no-fit: {{ .Values.noFit }}
namespace-label: {{ .Values.namespaceLabel.key }}
namespace-label-value: {{ .Values.namespaceLabel.value | quote }}
{{- with .Values.extraSettings }}
{{ toYaml . }}
{{- end }}
{{- end -}}
