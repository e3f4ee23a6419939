{{/* Names and labels shared by every object of a release. */}}
{{- define "gridroute.fullname" -}}
{{- if contains "gridroute" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-gridroute" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gridroute.labels" -}}
app.kubernetes.io/name: gridroute
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
gridroute.io/site: {{ .Values.site | quote }}
{{- end -}}

{{/* Selector labels of one component: gateway, operator, control-plane. */}}
{{- define "gridroute.selector" -}}
app.kubernetes.io/name: gridroute
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gridroute.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "gridroute.tlsOn" -}}
{{- if ne .Values.tls.mode "none" }}true{{ end -}}
{{- end -}}

{{/* The Secret of one certificate: gateway, operator, operatorClient, control. */}}
{{- define "gridroute.secret" -}}
{{- $names := dict "gateway" "gateway-tls" "operator" "operator-tls" "operatorClient" "operator-client-tls" "control" "control-tls" -}}
{{- $given := get .root.Values.tls.secrets .which -}}
{{- if $given -}}{{ $given }}{{- else -}}{{ include "gridroute.fullname" .root }}-{{ get $names .which }}{{- end -}}
{{- end -}}

{{/* gateway.yaml: the values' config with the chart's listen, workers and metrics. */}}
{{- define "gridroute.gatewayConfig" -}}
{{- $v := .Values.gateway -}}
{{- $cfg := deepCopy ($v.config | default dict) -}}
{{- if not (hasKey $cfg "local_site") }}{{ $_ := set $cfg "local_site" .Values.site }}{{ end -}}
{{- $metrics := deepCopy (get $cfg "metrics" | default dict) -}}
{{- $_ := set $metrics "listen" (printf "0.0.0.0:%d" (int $v.metricsPort)) -}}
{{- $_ := set $cfg "metrics" $metrics -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int $v.port)) -}}
{{- $_ := set $cfg "workers" 1 -}}
{{- if $v.overlay -}}
{{- $overlay := deepCopy (get $cfg "overlay" | default dict) -}}
{{- if not (hasKey $overlay "file") }}{{ $_ := set $overlay "file" (printf "%s/overlay.json" .Values.paths.config) }}{{ end -}}
{{- $_ := set $cfg "overlay" $overlay -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* operator.yaml: the values' config with the chart's site, listen and tls. */}}
{{- define "gridroute.operatorConfig" -}}
{{- $cfg := deepCopy (.Values.operator.config | default dict) -}}
{{- $_ := set $cfg "site" .Values.site -}}
{{- $_ := set $cfg "trustDomain" .Values.trustDomain -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int .Values.operator.port)) -}}
{{- if include "gridroute.tlsOn" . -}}
{{- $d := .Values.paths.tls -}}
{{- $_ := set $cfg "tls" (dict "cert" (printf "%s/operator/tls.crt" $d) "key" (printf "%s/operator/tls.key" $d) "ca" (printf "%s/operator/ca.crt" $d) "clientCert" (printf "%s/operator-client/tls.crt" $d) "clientKey" (printf "%s/operator-client/tls.key" $d)) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Seconds from SIGTERM to the last stream: preStop sleep, drain, grace, and 5 more. */}}
{{- define "gridroute.gatewayGrace" -}}
{{- $cfg := .Values.gateway.config | default dict -}}
{{- $drain := 5.0 -}}{{- if hasKey $cfg "shutdown_drain_s" }}{{ $drain = float64 $cfg.shutdown_drain_s }}{{ end -}}
{{- $grace := 30.0 -}}{{- if hasKey $cfg "shutdown_grace_s" }}{{ $grace = float64 $cfg.shutdown_grace_s }}{{ end -}}
{{- addf (float64 .Values.gateway.preStopSleepSeconds) $drain $grace 5 | ceil | int -}}
{{- end -}}

{{/* The init container that fails the rollout on a bad file, naming the field. */}}
{{- define "gridroute.configCheck" -}}
{{- if .root.Values.configCheck.enabled }}
initContainers:
  - name: config-check
    image: {{ include "gridroute.image" .root }}
    imagePullPolicy: {{ .root.Values.image.pullPolicy }}
    args: ["config", "check", "--kind", {{ .kind | quote }}, {{ .file | quote }}]
    securityContext: {{- toYaml .root.Values.securityContext | nindent 6 }}
    resources:
      requests: {cpu: 50m, memory: 64Mi}
      limits: {memory: 256Mi}
    volumeMounts: {{- .mounts | nindent 6 }}
{{- end }}
{{- end -}}
