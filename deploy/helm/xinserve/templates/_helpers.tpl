{{- define "xinserve.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "xinserve.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
xinserve.io/chip: {{ .Values.chip }}
{{- end -}}

{{- define "xinserve.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "xinserve.profile" -}}
{{- $p := get .Values.chipProfiles .Values.chip -}}
{{- if not $p -}}{{- fail (printf "chip %q is not in chipProfiles" .Values.chip) -}}{{- end -}}
{{- toYaml $p -}}
{{- end -}}

{{- define "xinserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "xinserve.fullname" .) .Values.serviceAccount.name }}{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: preStop sleep, then the drain, then engine stop and audit checkpoint. */}}
{{- define "xinserve.terminationGrace" -}}
{{- add (int .Values.lifecycle.preStopSleepSeconds) (int .Values.server.drainGraceSeconds) (int .Values.lifecycle.shutdownMarginSeconds) -}}
{{- end -}}

{{/* The probes: native gRPC on the plaintext port, or exec service.healthcheck on the loopback port under TLS. */}}
{{- define "xinserve.probeAction" -}}
{{- if .Values.tls.secretName }}
exec:
  command: ["python3", "-m", "service.healthcheck", "127.0.0.1:{{ .Values.probes.healthPort }}"]
{{- else }}
grpc:
  port: {{ .Values.server.grpcPort }}
  service: ""
{{- end }}
{{- end -}}

{{- define "xinserve.probes" -}}
startupProbe:
  {{- include "xinserve.probeAction" . | trim | nindent 2 }}
  {{- toYaml .Values.probes.startup | nindent 2 }}
readinessProbe:
  {{- include "xinserve.probeAction" . | trim | nindent 2 }}
  {{- toYaml .Values.probes.readiness | nindent 2 }}
livenessProbe:
  {{- include "xinserve.probeAction" . | trim | nindent 2 }}
  {{- toYaml .Values.probes.liveness | nindent 2 }}
{{- end -}}

{{- define "xinserve.deviceResources" -}}
{{- $p := include "xinserve.profile" . | fromYaml -}}
{{- $r := deepCopy .Values.resources -}}
{{- if and $p.resource (gt (int .Values.devicesPerPod) 0) -}}
{{- $_ := set $r "limits" (merge (dict $p.resource (int .Values.devicesPerPod)) (default dict $r.limits)) -}}
{{- $_ := set $r "requests" (merge (dict $p.resource (int .Values.devicesPerPod)) (default dict $r.requests)) -}}
{{- end -}}
{{- toYaml $r -}}
{{- end -}}

{{- define "xinserve.image" -}}
{{- $p := include "xinserve.profile" . | fromYaml -}}
{{- printf "%s:%s" .Values.image.repository (default $p.imageTag .Values.image.tag) -}}
{{- end -}}

{{/* The xinserve container (shared by the Deployment and the LeaderWorkerSet leader). */}}
{{- define "xinserve.serverContainer" -}}
- name: xinserve
  image: {{ include "xinserve.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if eq .Values.mode "leaderworkerset" }}
  command: ["/bin/sh", "-c"]
  args:
    - >-
      ray start --head --port={{ .Values.lws.rayPort }} --disable-usage-stats &&
      exec xinserve serve --config /etc/xinserve/config/config.yaml
  {{- else }}
  command: ["xinserve", "serve"]
  args: ["--config", "/etc/xinserve/config/config.yaml"]
  {{- end }}
  env:
    - {name: HOME, value: /var/lib/xinserve}
    - {name: XDG_CACHE_HOME, value: /var/lib/xinserve/.cache}
    - {name: XINSERVE_AUDIT__NODE_ID, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    {{- if eq .Values.audit.backend "postgresql" }}
    - name: XINSERVE_AUDIT__DSN
      valueFrom:
        secretKeyRef: {name: {{ required "audit.postgresql.dsnSecretName is required for the postgresql backend" .Values.audit.postgresql.dsnSecretName }}, key: {{ .Values.audit.postgresql.dsnSecretKey }}}
    {{- end }}
  ports:
    - {name: grpc, containerPort: {{ .Values.server.grpcPort }}, protocol: TCP}
    - {name: metrics, containerPort: {{ .Values.server.metricsPort }}, protocol: TCP}
    {{- if .Values.server.http }}
    - {name: http, containerPort: {{ .Values.server.httpPort }}, protocol: TCP}
    {{- end }}
    {{- if eq .Values.mode "leaderworkerset" }}
    - {name: ray, containerPort: {{ .Values.lws.rayPort }}, protocol: TCP}
    {{- end }}
  {{- include "xinserve.probes" . | nindent 2 }}
  lifecycle:
    preStop:
      sleep: {seconds: {{ .Values.lifecycle.preStopSleepSeconds }}}
  resources:
    {{- include "xinserve.deviceResources" . | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "xinserve.volumeMounts" . | nindent 4 }}
{{- end -}}

{{- define "xinserve.volumeMounts" -}}
- {name: config, mountPath: /etc/xinserve/config, readOnly: true}
- {name: data, mountPath: /var/lib/xinserve}
- {name: tmp, mountPath: /tmp}
- {name: shm, mountPath: /dev/shm}
- {name: models, mountPath: {{ .Values.modelMountPath }}, readOnly: true}
{{- if .Values.trustStore.configMap }}
- {name: trust, mountPath: /etc/xinserve/trust, readOnly: true}
{{- end }}
{{- if .Values.tls.secretName }}
- {name: tls, mountPath: /etc/xinserve/tls, readOnly: true}
{{- end }}
{{- if .Values.tls.clientCASecretName }}
- {name: client-ca, mountPath: /etc/xinserve/client-ca, readOnly: true}
{{- end }}
{{- if .Values.auth.tokenSecretName }}
- {name: tokens, mountPath: /etc/xinserve/tokens, readOnly: true}
{{- end }}
{{- end -}}

{{- define "xinserve.volumes" -}}
- name: config
  configMap: {name: {{ include "xinserve.fullname" . }}-config}
- name: data
  {{- if include "xinserve.dataOnVolume" . }}
  persistentVolumeClaim: {claimName: {{ include "xinserve.fullname" . }}-data}
  {{- else }}
  emptyDir: {}
  {{- end }}
- name: tmp
  emptyDir: {}
- name: shm
  emptyDir: {medium: Memory, sizeLimit: {{ .Values.shmSizeLimit }}}
- name: models
  {{- toYaml .Values.modelVolume | nindent 2 }}
{{- if .Values.trustStore.configMap }}
- name: trust
  configMap: {name: {{ .Values.trustStore.configMap }}}
{{- end }}
{{- if .Values.tls.secretName }}
- name: tls
  secret: {secretName: {{ .Values.tls.secretName }}}
{{- end }}
{{- if .Values.tls.clientCASecretName }}
- name: client-ca
  secret: {secretName: {{ .Values.tls.clientCASecretName }}}
{{- end }}
{{- if .Values.auth.tokenSecretName }}
- name: tokens
  secret: {secretName: {{ .Values.auth.tokenSecretName }}}
{{- end }}
{{- end -}}

{{- define "xinserve.podSpecCommon" -}}
serviceAccountName: {{ include "xinserve.serviceAccountName" . }}
automountServiceAccountToken: false
terminationGracePeriodSeconds: {{ include "xinserve.terminationGrace" . }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The data directory (server key, SQLite audit log) lives on the PVC for a single SQLite-audited pod. */}}
{{- define "xinserve.dataOnVolume" -}}
{{- if and .Values.persistence.enabled (eq .Values.mode "deployment") (eq .Values.audit.backend "sqlite") -}}true{{- end -}}
{{- end -}}
