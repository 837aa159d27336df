{{/*
jobvault.labels: the labels config/ gives every object (app.kubernetes.io/name, and the component
when there is one), and Helm's own. Call with (dict "root" $ "component" "archiver").
*/}}
{{- define "jobvault.labels" -}}
app.kubernetes.io/name: jobvault
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{ include "jobvault.helmLabels" .root }}
{{- end }}

{{/*
jobvault.helmLabels: what Helm's charts conventionally add; config/ has neither. A label value
cannot hold the "+" of a version's build metadata.
*/}}
{{- define "jobvault.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
jobvault.selector: a component's pod labels and selector. Never Helm's labels: a selector cannot
change, and an install moved between config/ and the chart keeps its workloads.
*/}}
{{- define "jobvault.selector" -}}
app.kubernetes.io/name: jobvault
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* jobvault.image: the one image holding both programs, and its pull policy if set. */}}
{{- define "jobvault.image" -}}
image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/*
jobvault.storeArgs: the store flags of the archiver and the agent. The S3 keys are files of the
mounted credentials Secret (jobvault.s3Mount), never flags.
*/}}
{{- define "jobvault.storeArgs" -}}
{{- $s := .Values.store }}
- --store-backend={{ $s.backend }}
{{- if eq $s.backend "fs" }}
- --store-fs-root={{ $s.fs.root }}
{{- else if eq $s.backend "s3" }}
- --store-s3-endpoint={{ $s.s3.endpoint }}
- --store-s3-bucket={{ $s.s3.bucket }}
- --store-s3-path-style={{ $s.s3.pathStyle }}
- --store-s3-tls={{ $s.s3.tls }}
- --store-s3-access-key-file=/etc/jobvault/s3/access-key
- --store-s3-secret-key-file=/etc/jobvault/s3/secret-key
{{- else if eq $s.backend "gcs" }}
- --store-gcs-bucket={{ $s.gcs.bucket }}
{{- end }}
{{- end }}

{{/* jobvault.s3Mount: where jobvault.storeArgs expects the S3 credentials. */}}
{{- define "jobvault.s3Mount" -}}
- name: s3-credentials
  mountPath: /etc/jobvault/s3
  readOnly: true
{{- end }}

{{/*
jobvault.s3Volume: the S3 credentials Secret as files. Call with (dict "secret" NAME "mode" MODE).
*/}}
{{- define "jobvault.s3Volume" -}}
- name: s3-credentials
  secret:
    secretName: {{ .secret }}
    defaultMode: {{ .mode }}
    items:
    - key: access-key
      path: access-key
    - key: secret-key
      path: secret-key
{{- end }}

{{/*
jobvault.dbEnv: the database settings from a Secret: the DSN without the password (read by --db-dsn's
default, $JOBVAULT_DB_DSN), and the password apart, which lib/pq reads from PGPASSWORD.
*/}}
{{- define "jobvault.dbEnv" -}}
- name: JOBVAULT_DB_DSN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: dsn
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: password
{{- end }}

{{/*
jobvault.embed: the objects of a YAML file of config/ (linked under files/), with jobvault-system
replaced by the release namespace (the policies name the archiver's ServiceAccount and the
operators' ConfigMap by it), Helm's labels added, if namespaced the release namespace, and if data
is given, that data. Call with (dict "root" $ "path" PATH "namespaced" BOOL ["data" DICT]).
Returns a YAML stream.
*/}}
{{- define "jobvault.embed" -}}
{{- $root := .root }}
{{- $text := $root.Files.Get .path | replace "jobvault-system" $root.Release.Namespace }}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if hasKey $obj "Error" }}
{{- fail (printf "%s: %s" $.path $obj.Error) }}
{{- end }}
{{- if $obj }}
{{- $labels := include "jobvault.helmLabels" $root | fromYaml }}
{{- $_ := set $obj.metadata "labels" (merge $labels ($obj.metadata.labels | default dict)) }}
{{- if $.namespaced }}
{{- $_ := set $obj.metadata "namespace" $root.Release.Namespace }}
{{- end }}
{{- with $.data }}
{{- $_ := set $obj "data" . }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}

{{/* jobvault.webhookCommon: what both webhooks of the MutatingWebhookConfiguration share. */}}
{{- define "jobvault.webhookCommon" -}}
reinvocationPolicy: IfNeeded
matchPolicy: Equivalent
sideEffects: None
admissionReviewVersions: ["v1"]
{{- end }}

{{/*
jobvault.clientConfig: a webhook's Service in the release namespace, and with self-signed
certificates the caBundle (cainjector writes it with cert-manager). Call with (dict "root" $ "path" P).
*/}}
{{- define "jobvault.clientConfig" -}}
clientConfig:
  {{- with .root.Values.certificates.caBundle }}
  {{- if eq $.root.Values.certificates.source "self-signed" }}
  caBundle: {{ . }}
  {{- end }}
  {{- end }}
  service:
    name: jobvault-webhook
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
{{- end }}

{{/*
jobvault.namespaceSelector: nothing is tracked in kube-system and the release namespace; the
archiver's --exclude-namespaces and the policies leave out the same two.
*/}}
{{- define "jobvault.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: ["kube-system", {{ .Release.Namespace | quote }}]
{{- end }}
