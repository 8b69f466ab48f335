{{/* podium's namespace: namespace.name, else the release's (helm install -n podium-system). */}}
{{- define "podium.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end -}}

{{/* The image reference; the tag defaults to the chart's appVersion. */}}
{{- define "podium.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The settings file podium reads with --config (docs/settings.md). */}}
{{- define "podium.settings" -}}
{{- $managed := list "policy-mode" "policy_mode" "placement" "zone-chooser" "zone_chooser" "no-fit" "no_fit" "namespace-label" "namespace_label" "namespace-label-value" "namespace_label_value" "namespace-shadow-value" "namespace_shadow_value" "mode" "own-namespace" "own_namespace" "writable-namespaces" "writable_namespaces" -}}
{{- range $key, $_ := .Values.extraSettings -}}
{{- if has $key $managed -}}
{{- fail (printf "extraSettings.%s: set it with its own value (policyMode, placement, zoneChooser, noFit, mode, namespaceLabel, rbac.namespaces; the namespace is namespace.name)" $key) -}}
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
namespace-shadow-value: {{ .Values.namespaceLabel.shadowValue }}
mode: {{ .Values.mode }}
{{- if eq .Values.rbac.scope "namespaced" }}
writable-namespaces: {{ toJson .Values.rbac.namespaces }}
{{- end }}
{{- with .Values.extraSettings }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The name of every object: fullnameOverride, else the release's name when it contains the
chart's name (nameOverride, else "podium"), else "<release>-<name>". "podium" for
`helm install podium`, the kustomize base's names; a canary release gets names of its own. */}}
{{- define "podium.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := .Values.nameOverride | default .Chart.Name -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* helm install/upgrade only (lookup finds nothing in `helm template`): refuse to take over a
MutatingWebhookConfiguration of the same name that this release did not create — one registered
by `kubectl apply -k manifests/...`, by `make demo DEMO_ARGS=--keep` or by another release —
and say what to do, rather than helm's "invalid ownership metadata". */}}
{{- define "podium.webhookNotTaken" -}}
{{- $name := include "podium.fullname" . -}}
{{- $found := lookup "admissionregistration.k8s.io/v1" "MutatingWebhookConfiguration" "" $name -}}
{{- if $found -}}
{{- $annotations := $found.metadata.annotations | default dict -}}
{{- $release := index $annotations "meta.helm.sh/release-name" | default "" -}}
{{- $namespace := index $annotations "meta.helm.sh/release-namespace" | default "" -}}
{{- if not (and (eq $release .Release.Name) (eq $namespace .Release.Namespace)) -}}
{{- $owner := "no Helm release: kubectl apply -k of manifests/, or `make demo DEMO_ARGS=--keep`, registered it" -}}
{{- if $release -}}
{{- $owner = printf "Helm release %s in namespace %s" $release $namespace -}}
{{- end -}}
{{- fail (printf "MutatingWebhookConfiguration %s already exists and belongs to %s. Two podium webhooks would both pin the same pods. Remove the other install first (kubectl delete mutatingwebhookconfiguration %s; for kustomize, kubectl delete -k <your overlay>; for Helm, helm uninstall), or install this one beside it under another name: another release name, or --set fullnameOverride=<name>, in a namespace of its own (docs/operations.md, \"A canary beside the main install\")." $name $owner $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The chart's name and version, as the helm.sh/chart label carries them. */}}
{{- define "podium.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* What selects the release's pods: the Service, the PodDisruptionBudget, the PodMonitor, the
Cilium policy and the spread constraints. Only app.kubernetes.io/name, whose value is the fullname
(unique per release), as before the standard labels came: a Deployment's selector is immutable, so
adding app.kubernetes.io/instance to it would make `helm upgrade` of an existing release fail. */}}
{{- define "podium.selectorLabels" -}}
app.kubernetes.io/name: {{ include "podium.fullname" . }}
{{- end -}}

{{/* The standard labels (helm.sh/chart, app.kubernetes.io/name, instance, version, managed-by)
that every object of the chart carries. */}}
{{- define "podium.labels" -}}
helm.sh/chart: {{ include "podium.chart" . }}
{{ include "podium.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
