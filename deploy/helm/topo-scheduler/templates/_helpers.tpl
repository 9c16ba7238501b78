{{/*
Helpers shared by the templates. Object names are fixed (topo-scheduler, topo-scheduler-agent,
...) as in deploy/: the annotation policy, the RBAC bindings and the local control plane's test
identities name them, so a second release in one cluster is not supported.
*/}}

{{/* The namespace every namespaced object goes to (values: namespace.name). */}}
{{- define "topo-scheduler.namespace" -}}
{{- required "namespace.name must be set" .Values.namespace.name -}}
{{- end -}}

{{/* The image both workloads run: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "topo-scheduler.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
The labels Helm's conventions add to every object's metadata (never to selectors or pod
templates, so that the workloads are the same as deploy/'s; the equivalence test drops exactly
these four).
*/}}
{{- define "topo-scheduler.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Metadata labels of an object that is part of topo-scheduler (as deploy/base's `labels:`). */}}
{{- define "topo-scheduler.labels" -}}
app.kubernetes.io/part-of: topo-scheduler
{{ include "topo-scheduler.helmLabels" . }}
{{- end -}}

{{/* The config file the ConfigMap holds, from values.config. */}}
{{- define "topo-scheduler.config" -}}
{{- include "topo-scheduler.checkConfig" . -}}
{{ toYaml .Values.config }}
{{- end -}}

{{/*
The config's cross-field rules that values.schema.json cannot state (the scheduler's own checks,
scheduler/config/__init__.py, say the same at start-up): refused at render time with the field's
path, as the schema refuses the rest.
*/}}
{{- define "topo-scheduler.checkConfig" -}}
{{- $lease := .Values.config.run.lease -}}
{{- if not (lt (float64 $lease.renewSeconds) (float64 $lease.durationSeconds)) -}}
{{- fail "config.run.lease.renewSeconds: must be above 0 and below durationSeconds" -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $vendor, $names := .Values.config.resources -}}
{{- range $names -}}
{{- if hasKey $seen . -}}
{{- fail (printf "config.resources.%s: %s is also listed under %s" $vendor . (get $seen .)) -}}
{{- end -}}
{{- $_ := set $seen . $vendor -}}
{{- end -}}
{{- end -}}
{{- $levels := dict -}}
{{- range $i, $level := .Values.config.topology.levels -}}
{{- range list $level.nodeLabel ($level.alias | default "") -}}
{{- if and . (hasKey $levels .) -}}
{{- fail (printf "config.topology.levels[%d]: %s names two levels" $i .) -}}
{{- end -}}
{{- if and . $.Values.config.topology.acceleratorLabel (has . (list "nvlink" "nvlink-domain")) -}}
{{- fail (printf "config.topology.levels: %s is a built-in level's name" .) -}}
{{- end -}}
{{- $_ := set $levels . $i -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Objects read from deploy/ itself: files/ holds symbolic links to deploy/base's ClusterRoles and
annotation policy deploy/optional's PodGroup CRD and deploy/redis-sentinel/'s objects (Helm reads a linked file's
content, and `helm package` stores it), so the chart cannot drift from kustomize's objects. Each
document gets this chart's namespace (in subjects and the policy's exempt users), Redis Secret and
labels.
Call with (dict "root" $ "file" "files/<name>.yaml").
*/}}
{{- define "topo-scheduler.fromDeploy" -}}
{{- $ns := include "topo-scheduler.namespace" .root -}}
{{- $text := .root.Files.Get .file -}}
{{- $text = $text | replace "namespace: topo-scheduler\n" (printf "namespace: %s\n" $ns) -}}
{{- $text = $text | replace "system:serviceaccount:topo-scheduler:" (printf "system:serviceaccount:%s:" $ns) -}}
{{- $text = $text | replace "topo-scheduler/topo-scheduler" (printf "%s/topo-scheduler" $ns) -}}
{{- $text = $text | replace "name: topo-scheduler-redis\n" (printf "name: %s\n" .root.Values.redis.secretName) -}}
{{- $labels := include "topo-scheduler.labels" .root | fromYaml -}}
{{- range $text | splitList "\n---\n" }}
{{- $doc := fromYaml . }}
{{- $_ := set $doc.metadata "labels" (merge (default (dict) $doc.metadata.labels) $labels) }}
---
{{ toYaml $doc }}
{{- end }}
{{- end -}}
