{{/* RBAC of the control plane: exactly what it calls, no more. tests/deploy/test_rbac.py
drives the map store and the route publisher through a recording client and compares
every (verb, resource) they call with these rules, both ways. */}}

{{/* The map store (control/store_kubernetes.py): get, list, server-side apply (patch;
create when new) and delete TrafficMaps; apply their status subresource. */}}
{{- define "gridroute.rbacMaps" -}}
- apiGroups: [ome.io]
  resources: [trafficmaps]
  verbs: [get, list, create, patch, delete]
- apiGroups: [ome.io]
  resources: [trafficmaps/status]
  verbs: [patch]
{{- end -}}

{{/* The route publisher (control/publish_kubernetes.py): server-side apply (patch;
create when new) and delete of each kind it renders; the kinds a route owns are also
listed by label, to prune those of clusters that left the map. */}}
{{- define "gridroute.rbacRoutes" -}}
- apiGroups: [gateway.networking.k8s.io]
  resources: [httproutes]
  verbs: [create, patch, delete]
- apiGroups: [gateway.networking.k8s.io]
  resources: [backendtlspolicies, referencegrants]
  verbs: [list, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [list, create, patch, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, create, patch, delete]
{{- end -}}
