{{- define "ragc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ragc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ragc.labels" -}}
app.kubernetes.io/name: {{ include "ragc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "ragc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ragc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ragc.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}

{{- define "ragc.milvusUri" -}}
{{- if .Values.milvus.enabled -}}
{{- printf "http://%s-milvus:19530" (include "ragc.fullname" .) -}}
{{- else -}}
{{- required "externalMilvus.uri is required when milvus.enabled is false" .Values.externalMilvus.uri -}}
{{- end -}}
{{- end -}}

{{- define "ragc.redisUrl" -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://%s-redis:6379/0" (include "ragc.fullname" .) -}}
{{- else -}}
{{- .Values.externalRedis.url -}}
{{- end -}}
{{- end -}}

{{/* The ragc config tree (cluster/config.py) as the pods see it: chart wiring, then .Values.ragcConfig. */}}
{{- define "ragc.config" -}}
{{- $redis := include "ragc.redisUrl" . -}}
{{- $wired := dict
  "state_dir" "/tmp/ragc"
  "milvus" (dict "uri" (include "ragc.milvusUri" .) "token" (dict "env_var" "MILVUS_TOKEN"))
  "redis" (dict "url" (ternary $redis nil (ne $redis "")) "enabled" (ne $redis "") "password" (dict "env_var" "REDIS_PASSWORD"))
  "ingest" (dict "gpus_per_actor" (ternary 1 0 .Values.workers.gpu.enabled))
  "serve" (dict "http_host" "0.0.0.0" "auth" (dict "enabled" true "api_keys" (dict "file" "/etc/ragc/secrets/api-keys.json")))
-}}
{{- toYaml (mustMergeOverwrite $wired (deepCopy .Values.ragcConfig)) -}}
{{- end -}}

{{/* Environment and volumes every Ray pod gets: config, secrets by reference, sources, models. */}}
{{- define "ragc.podEnv" -}}
- name: RAGC_CONFIG
  value: /etc/ragc/config.yaml
- name: RAY_USAGE_STATS_ENABLED
  value: "0"
- name: HF_HUB_OFFLINE
  value: "1"
{{- /* Serve's proxy answers a request whose replica was lost with a 503 (serve/edge/lost_replica.py) */}}
- name: RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH
  value: serve.edge.lost_replica:proxy_middlewares
{{- if .Values.existingSecret }}
- name: MILVUS_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ .Values.existingSecret }}, key: {{ .Values.secretKeys.milvusToken }}, optional: true}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ .Values.existingSecret }}, key: {{ .Values.secretKeys.redisPassword }}, optional: true}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef: {name: {{ .Values.existingSecret }}, key: {{ .Values.secretKeys.awsAccessKeyId }}, optional: true}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef: {name: {{ .Values.existingSecret }}, key: {{ .Values.secretKeys.awsSecretAccessKey }}, optional: true}
{{- end }}
{{- with .Values.objectStore.endpointUrl }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.objectStore.region }}
- name: AWS_DEFAULT_REGION
  value: {{ . | quote }}
{{- end }}
{{- if .Values.tracing.enabled }}
{{- /* Serve's proxy and replicas read these (serve/tracing.py: tracing_env) */}}
- name: RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH
  value: serve.tracing:otlp_span_processors
- name: RAY_SERVE_TRACING_SAMPLING_RATIO
  value: {{ .Values.tracing.samplingRatio | quote }}
- name: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
  value: {{ required "tracing.otlpEndpoint is required when tracing.enabled" .Values.tracing.otlpEndpoint | quote }}
- name: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
  value: http/protobuf
- name: OTEL_SERVICE_NAME
  value: {{ include "ragc.fullname" . }}
{{- end }}
{{- end -}}

{{- define "ragc.volumeMounts" -}}
- name: config
  mountPath: /etc/ragc/config.yaml
  subPath: config.yaml
{{- if .Values.existingSecret }}
- name: secrets
  mountPath: /etc/ragc/secrets
  readOnly: true
{{- end }}
{{- if .Values.sources.pvc.claimName }}
- name: sources
  mountPath: {{ .Values.sources.pvc.mountPath }}
  readOnly: true
{{- end }}
{{- if .Values.models.volume.claimName }}
- name: models
  mountPath: {{ .Values.models.volume.mountPath }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "ragc.volumes" -}}
- name: config
  configMap:
    name: {{ include "ragc.fullname" . }}-config
{{- if .Values.existingSecret }}
- name: secrets
  secret:
    secretName: {{ .Values.existingSecret }}
    items:
      - key: {{ .Values.secretKeys.apiKeys }}
        path: api-keys.json
{{- end }}
{{- if .Values.sources.pvc.claimName }}
- name: sources
  persistentVolumeClaim:
    claimName: {{ .Values.sources.pvc.claimName }}
    readOnly: true
{{- end }}
{{- if .Values.models.volume.claimName }}
- name: models
  persistentVolumeClaim:
    claimName: {{ .Values.models.volume.claimName }}
    readOnly: true
{{- end }}
{{- end -}}

{{/* A Ray container; args: root context and the group's values. */}}
{{- define "ragc.rayContainer" -}}
{{- $root := index . 0 -}}
{{- $group := index . 1 -}}
- name: ray
  image: {{ include "ragc.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  env:
    {{- include "ragc.podEnv" $root | nindent 4 }}
  resources:
    {{- toYaml $group.resources | nindent 4 }}
  volumeMounts:
    {{- include "ragc.volumeMounts" $root | nindent 4 }}
{{- end -}}

{{/* RayClusterSpec shared by the RayService and the RayJobs: (dict "root" $ "component" NAME). The component
     label keeps each cluster's pods apart: only the RayService's take traffic or count in the PDB. */}}
{{- define "ragc.rayClusterSpec" -}}
{{- $root := .root -}}
{{- $component := .component -}}
rayVersion: {{ $root.Values.rayVersion | quote }}
enableInTreeAutoscaling: {{ $root.Values.autoscaler.enabled }}
{{- if $root.Values.autoscaler.enabled }}
autoscalerOptions:
  idleTimeoutSeconds: {{ $root.Values.autoscaler.idleTimeoutSeconds }}
  upscalingMode: Default
{{- end }}
headGroupSpec:
  rayStartParams:
    num-cpus: "0"
    dashboard-host: 0.0.0.0
    metrics-export-port: {{ $root.Values.metricsPort | quote }}
  template:
    metadata:
      labels:
        {{- include "ragc.selectorLabels" $root | nindent 8 }}
        ragc.io/role: head
        ragc.io/component: {{ $component }}
    spec:
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.head.nodeSelector }}
      nodeSelector: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.head.tolerations }}
      tolerations: {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        {{- include "ragc.rayContainer" (list $root $root.Values.head) | nindent 8 }}
          ports:
            - {containerPort: 6379, name: gcs-server}
            - {containerPort: 8265, name: dashboard}
            - {containerPort: 10001, name: client}
            - {containerPort: {{ $root.Values.serve.httpPort }}, name: serve}
            - {containerPort: {{ $root.Values.metricsPort }}, name: metrics}
      volumes:
        {{- include "ragc.volumes" $root | nindent 8 }}
workerGroupSpecs:
{{- with $root.Values.workers.cpu }}
{{- if .enabled }}
  - groupName: cpu
    replicas: {{ .replicas }}
    minReplicas: {{ .minReplicas }}
    maxReplicas: {{ .maxReplicas }}
    rayStartParams:
      metrics-export-port: {{ $root.Values.metricsPort | quote }}
    template:
      metadata:
        labels:
          {{- include "ragc.selectorLabels" $root | nindent 10 }}
          ragc.io/role: cpu-worker
          ragc.io/component: {{ $component }}
      spec:
        {{- with .nodeSelector }}
        nodeSelector: {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with .tolerations }}
        tolerations: {{- toYaml . | nindent 10 }}
        {{- end }}
        containers:
          {{- include "ragc.rayContainer" (list $root .) | nindent 10 }}
            ports:
              - {containerPort: {{ $root.Values.metricsPort }}, name: metrics}
        volumes:
          {{- include "ragc.volumes" $root | nindent 10 }}
{{- end }}
{{- end }}
{{- with $root.Values.workers.gpu }}
{{- if .enabled }}
  - groupName: gpu
    replicas: {{ .replicas }}
    minReplicas: {{ .minReplicas }}
    maxReplicas: {{ .maxReplicas }}
    rayStartParams:
      num-gpus: {{ .gpusPerWorker | quote }}
      metrics-export-port: {{ $root.Values.metricsPort | quote }}
    template:
      metadata:
        labels:
          {{- include "ragc.selectorLabels" $root | nindent 10 }}
          ragc.io/role: gpu-worker
          ragc.io/component: {{ $component }}
      spec:
        {{- with .nodeSelector }}
        nodeSelector: {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with .tolerations }}
        tolerations: {{- toYaml . | nindent 10 }}
        {{- end }}
        containers:
          - name: ray
            image: {{ include "ragc.image" $root }}
            imagePullPolicy: {{ $root.Values.image.pullPolicy }}
            env:
              {{- include "ragc.podEnv" $root | nindent 14 }}
            resources:
              requests:
                {{- toYaml .resources.requests | nindent 16 }}
                nvidia.com/gpu: {{ .gpusPerWorker }}
              limits:
                {{- toYaml .resources.limits | nindent 16 }}
                nvidia.com/gpu: {{ .gpusPerWorker }}
            volumeMounts:
              {{- include "ragc.volumeMounts" $root | nindent 14 }}
            ports:
              - {containerPort: {{ $root.Values.metricsPort }}, name: metrics}
        volumes:
          {{- include "ragc.volumes" $root | nindent 10 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The label matchers that pick this release's series in alert expressions (alerts.matchLabels, else the namespace). */}}
{{- define "ragc.alertMatchers" -}}
{{- $labels := .Values.alerts.matchLabels | default (dict "namespace" .Release.Namespace) -}}
{{- $parts := list -}}
{{- range $key := keys $labels | sortAlpha -}}
{{- $parts = append $parts (printf "%s=%q" $key (get $labels $key)) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{/* A counter's growth over a window, counting a series that first appeared in it (Ray exports a counter from its
first increment, so increase() alone never sees a first event). Args: series (a selector), window. */}}
{{- define "ragc.countSince" -}}
({{ .series }} unless {{ .series }} offset {{ .window }}) or increase({{ .series }}[{{ .window }}])
{{- end -}}
