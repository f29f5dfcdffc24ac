{{/*
THE operator's permissions, in one place. Everything the operator (hybridmq_operator) reads or
writes must be listed here and nothing more; reconcile this list with the operator's code (its
builders in hybridmq_operator/resources/ and its handlers) whenever either changes.
tests/unit/test_chart.py asserts the rendered rules.

Why each rule:
  * hybridmq.io: the operator owns BrokerClusters (reads, patches for Kopf's finalizer/annotations,
    writes status) and Partitions (creates, deletes, writes status, removes its finalizer).
  * StatefulSets, Services, ConfigMaps, ServiceAccounts, PodDisruptionBudgets, Roles and
    RoleBindings: the children it builds per BrokerCluster.
  * Pods: it watches MM pods to detect loss and deletes pods to roll them (never creates them).
  * Leases: it watches the MMs' Leases (failure detection). The brokers' Role, which the operator
    creates, grants them create/get/update/patch on leases; Kubernetes' RBAC escalation rule only
    lets the operator create that Role if it holds those verbs itself. The same goes for the
    brokers' get/list/watch on partitions and brokerclusters.
  * Events: one per failover step and per garbage collection (Kopf posts core/v1 events).
  * NetworkPolicies: the child that lets only a cluster's own pods reach its MMs' broker port.
  * Secrets: get, create, patch. The cluster secret (created once), the cluster CA (read back to
    sign, the brokers' certificate applied), the CMs' users Secret and each BrokerUser's password
    (read by name); never listed, watched or deleted (garbage collection deletes them). The
    brokers' Role grants the CMs get on their users Secret by name, which the operator holds.
  * BrokerUsers: watched; their status written.
*/}}
{{- define "hybridmq.operator.namespacedRules" -}}
- apiGroups: ["hybridmq.io"]
  resources: ["brokerclusters"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["hybridmq.io"]
  resources: ["partitions"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["hybridmq.io"]
  resources: ["brokerusers"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["hybridmq.io"]
  resources: ["brokerusers/status"]
  verbs: ["get", "patch"]
- apiGroups: ["hybridmq.io"]
  resources: ["brokerclusters/status", "partitions/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: ["hybridmq.io"]
  resources: ["brokerclusters/finalizers", "partitions/finalizers"]
  verbs: ["update"]
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if and .Values.peering.enabled .Values.operator.watchNamespaces }}
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}

{{/* Cluster-scoped: the nodes MM pods run on (get: their messageManagers.topologyKey label is
    the MMs' failure domain; with operator.watchNamespaces the chart grants nothing cluster-scoped,
    so failure domains stay unknown and the status says so), and Kopf's ClusterKopfPeering when
    the operator watches all namespaces. (Kopf's CRD scanning is off in
    hybridmq_operator.handlers.startup unless HYBRIDMQ_OPERATOR_SCANNING=1, so no
    customresourcedefinitions access is needed.) */}}
{{- define "hybridmq.operator.clusterRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
{{- if and .Values.peering.enabled (not .Values.operator.watchNamespaces) }}
- apiGroups: ["kopf.dev"]
  resources: ["clusterkopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}
