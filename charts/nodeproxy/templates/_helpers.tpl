{{/*
The hub's image reference.
*/}}
{{- define "nodeproxy.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/*
The node endpoint's image reference: the DaemonSet's container and its
--image, which the static pod runs, always the same.
*/}}
{{- define "nodeproxy.nodeImage" -}}
{{ .Values.node.image.repository }}:{{ .Values.node.image.tag }}
{{- end }}

{{/*
The hub's Service name as clients inside the cluster reach it.
*/}}
{{- define "nodeproxy.serviceHost" -}}
nodeproxy.{{ .Release.Namespace }}.svc
{{- end }}

{{/*
The headless Service whose endpoints, ready or not, are the sharded hub's
replicas (--shard-service), and the DNS label of their stable names.
*/}}
{{- define "nodeproxy.shardsService" -}}
nodeproxy-shards
{{- end }}
