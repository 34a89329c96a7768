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
    - |
      ray start --head --port={{ .Values.lws.rayPort }} --disable-usage-stats || exit 1
      python3 /etc/xinserve/config/wait-for-ray-workers.py --nodes {{ .Values.lws.size }} --timeout {{ .Values.lws.workerWaitSeconds }} || exit 1
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
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.extraEnvFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
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
{{- if .Values.audit.serverKey.secretName }}
- {name: server-key, mountPath: /etc/xinserve/server-key, readOnly: true}
{{- end }}
{{- if eq .Values.audit.backend "postgresql" }}
- {name: audit-archive, mountPath: /var/lib/xinserve-archive}
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
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
{{- if .Values.audit.serverKey.secretName }}
- name: server-key
  secret: {secretName: {{ .Values.audit.serverKey.secretName }}}
{{- end }}
{{- if eq .Values.audit.backend "postgresql" }}
- name: audit-archive
  {{- if .Values.audit.postgresql.archiveVolume }}
  {{- toYaml .Values.audit.postgresql.archiveVolume | nindent 2 }}
  {{- else if .Values.dangerouslyAllowEphemeralAuditLog }}
  emptyDir: {}
  {{- else }}
  {{- fail "audit.backend=postgresql needs audit.postgresql.archiveVolume (a volume every replica can write, for the retention archives written before records are purged)" }}
  {{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
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
{{- with .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.schedulerName }}
schedulerName: {{ . }}
{{- end }}
{{- end -}}

{{/* The data directory (server key, SQLite audit log) lives on the PVC for a single SQLite-audited pod. */}}
{{- define "xinserve.dataOnVolume" -}}
{{- if and .Values.persistence.enabled (eq .Values.mode "deployment") (eq .Values.audit.backend "sqlite") -}}true{{- end -}}
{{- end -}}


{{/* The pod holds accelerator cards (a surge pod would need a second set). */}}
{{- define "xinserve.holdsDevices" -}}
{{- $p := include "xinserve.profile" . | fromYaml -}}
{{- if and $p.resource (gt (int .Values.devicesPerPod) 0) -}}true{{- end -}}
{{- end -}}

{{/* The Deployment's strategy: the value, or Recreate for the SQLite log on a volume or cards held. */}}
{{- define "xinserve.strategy" -}}
{{- $s := .Values.strategy -}}
{{- if and $s (eq (default "RollingUpdate" $s.type) "RollingUpdate") (eq .Values.audit.backend "sqlite") -}}
{{- $surge := "25%" -}}
{{- if and $s.rollingUpdate (hasKey $s.rollingUpdate "maxSurge") -}}{{- $surge = toString $s.rollingUpdate.maxSurge -}}{{- end -}}
{{- if not (or (eq $surge "0") (eq $surge "0%")) -}}
{{- fail "strategy: a RollingUpdate that surges cannot work with audit.backend=sqlite (the new pod cannot take the audit database's writer lock while the old one runs): use type Recreate, or maxSurge 0" -}}
{{- end -}}
{{- end -}}
{{- if $s -}}
{{- toYaml $s -}}
{{- else if or (include "xinserve.dataOnVolume" .) (include "xinserve.holdsDevices" .) -}}
type: Recreate
{{- else -}}
type: RollingUpdate
rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
{{- end -}}
{{- end -}}

{{/* Refuse the audit log or the server key on an emptyDir unless dangerouslyAllowEphemeralAuditLog. */}}
{{- define "xinserve.checkDurableAudit" -}}
{{- if not .Values.dangerouslyAllowEphemeralAuditLog -}}
{{- if and (eq .Values.audit.backend "sqlite") (not (include "xinserve.dataOnVolume" .)) -}}
{{- fail (printf "the SQLite audit log and the server's SM2 key would live on an emptyDir (mode=%s, persistence.enabled=%v) and be lost with the pod: use persistence.enabled=true in mode deployment, or audit.backend=postgresql with audit.serverKey.secretName (or set dangerouslyAllowEphemeralAuditLog=true)" .Values.mode .Values.persistence.enabled) -}}
{{- end -}}
{{- if and (eq .Values.audit.backend "postgresql") (not .Values.audit.serverKey.secretName) -}}
{{- fail "audit.backend=postgresql keeps no volume: the server's SM2 key would live on an emptyDir and change with every pod; set audit.serverKey.secretName (or dangerouslyAllowEphemeralAuditLog=true)" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Pod-template annotations that restart the pods when what they read at start changes. */}}
{{- define "xinserve.checksums" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- with .Values.secretRotation.revision }}
xinserve.io/secrets-revision: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The Secrets and ConfigMaps the pods mount, for Stakater Reloader's annotations on the workload. */}}
{{- define "xinserve.reloaderAnnotations" -}}
{{- if .Values.secretRotation.reloader -}}
{{- $secrets := compact (list .Values.tls.secretName .Values.tls.clientCASecretName .Values.auth.tokenSecretName .Values.audit.serverKey.secretName) -}}
{{- with $secrets }}
secret.reloader.stakater.com/reload: {{ join "," . | quote }}
{{- end }}
{{- with .Values.trustStore.configMap }}
configmap.reloader.stakater.com/reload: {{ . | quote }}
{{- end }}
{{- end -}}
{{- end -}}
