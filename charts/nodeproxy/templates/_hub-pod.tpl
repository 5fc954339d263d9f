{{/*
The hub's pod template: the Deployment's (deployment.yaml) and, with
sharding.enabled, the StatefulSet's (sharding/statefulset.yaml), one pod
so that the two cannot drift, as overlays/sharded's StatefulSet is the
base Deployment's pod plus the sharding flags. Written at column 0;
included with nindent 4 under spec.template.
*/}}
{{- define "nodeproxy.hubPodTemplate" -}}
metadata:
  labels:
    app.kubernetes.io/name: nodeproxy
spec:
  serviceAccountName: nodeproxy
  # Replicas on different nodes where there are enough: losing a node
  # loses one replica's clients, who resume on another.
  affinity:
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              app.kubernetes.io/name: nodeproxy
  {{- if .Values.hub.spreadOverNodes }}
  topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        app.kubernetes.io/name: nodeproxy
  {{- end }}
  {{- with .Values.hub.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.hub.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.hub.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  # Longer than --shutdown-delay-duration plus the time to drain watches.
  terminationGracePeriodSeconds: 60
  containers:
  - name: nodeproxy
    image: {{ include "nodeproxy.image" . }}
    {{- with .Values.image.pullPolicy }}
    imagePullPolicy: {{ . }}
    {{- end }}
    args:
    - serve
    - --secure-port=8443
    - --shutdown-delay-duration=10s
    # From cert-manager (certificates.yaml) or yours; reloaded when renewed.
    - --tls-cert-file=/etc/nodeproxy/tls/tls.crt
    - --tls-private-key-file=/etc/nodeproxy/tls/tls.key
    {{- if .Values.hub.uncachedTypes }}
    - --bulk-uncached-types
    {{- end }}
    {{- if .Values.sharding.enabled }}
    # The replicas share the nodes among the endpoints of the
    # headless Service (sharding/headless-service.yaml); this one is
    # POD_NAME.
    - --shard-service={{ include "nodeproxy.shardsService" . }}
    # The CA of the replicas' serving certificates (ca.crt beside them): a
    # replica asked by kube-apiserver's webhook about a node it does not
    # hold asks the replica that does.
    - --shard-peer-ca-file=/etc/nodeproxy/tls/ca.crt
    {{- end }}
    {{- range .Values.hub.extraArgs }}
    - {{ . | quote }}
    {{- end }}
    {{- if or .Values.hub.goMemLimit .Values.sharding.enabled }}
    env:
    {{- with .Values.hub.goMemLimit }}
    - name: GOMEMLIMIT
      value: {{ . | quote }}
    {{- end }}
    {{- if .Values.sharding.enabled }}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: POD_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
    {{- end }}
    {{- end }}
    ports:
    - name: https
      containerPort: 8443
    livenessProbe:
      httpGet: {path: /livez, port: https, scheme: HTTPS}
      periodSeconds: 10
    readinessProbe:
      httpGet: {path: /readyz, port: https, scheme: HTTPS}
      periodSeconds: 5
    {{- with .Values.hub.resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    volumeMounts:
    - {name: serving, mountPath: /etc/nodeproxy/tls, readOnly: true}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      runAsNonRoot: true
      runAsUser: 65534
      capabilities: {drop: [ALL]}
      seccompProfile: {type: RuntimeDefault}
  volumes:
  - name: serving
    secret:
      secretName: nodeproxy-serving
      items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
      {{- if .Values.sharding.enabled }}
      - {key: ca.crt, path: ca.crt}
      {{- end }}
{{- end }}
