{{/* Names, labels and image references shared by every template. */}}

{{- define "hybridmq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hybridmq.fullname" -}}
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

{{- define "hybridmq.operator.fullname" -}}
{{- printf "%s-operator" (include "hybridmq.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hybridmq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hybridmq.labels" -}}
helm.sh/chart: {{ include "hybridmq.chart" . }}
{{ include "hybridmq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hybridmq
{{- end }}

{{- define "hybridmq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hybridmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hybridmq.operator.labels" -}}
{{ include "hybridmq.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "hybridmq.operator.selectorLabels" -}}
{{ include "hybridmq.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "hybridmq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hybridmq.operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* An image reference from {repository, tag, digest}; the tag defaults to the chart's appVersion. */}}
{{- define "hybridmq.image" -}}
{{- $image := .image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .root.Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end }}

{{- define "hybridmq.operator.image" -}}
{{- include "hybridmq.image" (dict "image" .Values.image.operator "root" .) -}}
{{- end }}

{{- define "hybridmq.broker.image" -}}
{{- include "hybridmq.image" (dict "image" .Values.image.broker "root" .) -}}
{{- end }}

{{/* The Kopf peering name (the ClusterKopfPeering / KopfPeering objects the operators share). */}}
{{- define "hybridmq.peeringName" -}}
{{- default (include "hybridmq.fullname" .) .Values.peering.name -}}
{{- end }}

{{- define "hybridmq.sampleCluster.namespace" -}}
{{- default .Release.Namespace .Values.sampleCluster.namespace -}}
{{- end }}

{{/* host:port of the CM client Service the helm test talks to: tests.bootstrap, else the sample
cluster's, created by the chart or applied from NOTES. */}}
{{- define "hybridmq.tests.bootstrap" -}}
{{- if .Values.tests.bootstrap -}}
{{- .Values.tests.bootstrap -}}
{{- else -}}
{{- printf "%s.%s.svc:%d" .Values.sampleCluster.name (include "hybridmq.sampleCluster.namespace" .) (int .Values.sampleCluster.clientPort) -}}
{{- end -}}
{{- end }}

{{/* "true" when the helm test speaks TLS to the CMs ("" otherwise): tests.tls.enabled, and for
"auto" the sample cluster's spec.tls.enabled (TLS is on unless it says false, as in the CRD). */}}
{{- define "hybridmq.tests.tls" -}}
{{- $enabled := .Values.tests.tls.enabled -}}
{{- if eq (toString $enabled) "auto" -}}
{{- $tls := .Values.sampleCluster.spec.tls | default dict -}}
{{- if ne (toString (get $tls "enabled")) "false" -}}true{{- end -}}
{{- else if $enabled -}}true
{{- end -}}
{{- end }}

{{/* The Secret whose ca.crt verifies the CMs for the helm test. */}}
{{- define "hybridmq.tests.caSecret" -}}
{{- $tls := .Values.sampleCluster.spec.tls | default dict -}}
{{- if .Values.tests.tls.caSecret -}}
{{- .Values.tests.tls.caSecret -}}
{{- else if get $tls "secretName" -}}
{{- get $tls "secretName" -}}
{{- else -}}
{{- printf "%s-cluster-ca-cert" .Values.sampleCluster.name -}}
{{- end -}}
{{- end }}

{{/* The name the CMs' certificate must carry for the helm test: the bootstrap's first host. */}}
{{- define "hybridmq.tests.serverName" -}}
{{- if .Values.tests.tls.serverName -}}
{{- .Values.tests.tls.serverName -}}
{{- else -}}
{{- regexReplaceAll ":[0-9]+$" (first (splitList "," (include "hybridmq.tests.bootstrap" .))) "" -}}
{{- end -}}
{{- end }}
