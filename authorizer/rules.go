package authorizer

// ruleKey is a resource as RBAC rules name it, split so that lookups
// allocate nothing.
type ruleKey struct{ group, resource, subresource string }

// verbSet is a set of verbs as bits.
type verbSet uint16

const (
	verbGet verbSet = 1 << iota
	verbList
	verbWatch
	verbCreate
	verbUpdate
	verbPatch
	verbDelete
	verbDeleteCollection
)

func verbBit(verb string) verbSet {
	switch verb {
	case "get":
		return verbGet
	case "list":
		return verbList
	case "watch":
		return verbWatch
	case "create":
		return verbCreate
	case "update":
		return verbUpdate
	case "patch":
		return verbPatch
	case "delete":
		return verbDelete
	case "deletecollection":
		return verbDeleteCollection
	}
	return 0
}

const read = verbGet | verbList | verbWatch

// staticRules are what the system:node ClusterRole of the RBAC bootstrap
// policy grants every node, with Kubernetes 1.36's default feature gates:
// DynamicResourceAllocation and KubeletServiceAccountTokenForCredential-
// Providers on, ClusterTrustBundle and PodCertificateRequest off. They
// decide every request the kind-specific rules do not take. None uses a
// wildcard, resource names or non-resource URLs, so a map lookup is the
// whole of RBAC's rule matching here.
var staticRules = map[ruleKey]verbSet{
	{"authentication.k8s.io", "tokenreviews", ""}:             verbCreate,
	{"authorization.k8s.io", "subjectaccessreviews", ""}:      verbCreate,
	{"authorization.k8s.io", "localsubjectaccessreviews", ""}: verbCreate,
	{"", "services", ""}:               read,
	{"", "nodes", ""}:                  verbCreate | read | verbUpdate | verbPatch,
	{"", "nodes", "status"}:            verbUpdate | verbPatch,
	{"", "events", ""}:                 verbCreate | verbUpdate | verbPatch,
	{"events.k8s.io", "events", ""}:    verbCreate | verbUpdate | verbPatch,
	{"", "pods", ""}:                   read | verbCreate | verbDelete,
	{"", "pods", "status"}:             verbUpdate | verbPatch,
	{"", "pods", "eviction"}:           verbCreate,
	{"", "secrets", ""}:                read,
	{"", "configmaps", ""}:             read,
	{"", "persistentvolumeclaims", ""}: verbGet,
	{"", "persistentvolumes", ""}:      verbGet,
	{"", "endpoints", ""}:              verbGet,
	{"certificates.k8s.io", "certificatesigningrequests", ""}: verbCreate | read,
	{"coordination.k8s.io", "leases", ""}:                     verbGet | verbCreate | verbUpdate | verbPatch | verbDelete,
	{"storage.k8s.io", "volumeattachments", ""}:               verbGet,
	{"", "serviceaccounts", "token"}:                          verbCreate,
	{"", "persistentvolumeclaims", "status"}:                  verbGet | verbUpdate | verbPatch,
	{"storage.k8s.io", "csidrivers", ""}:                      read,
	{"storage.k8s.io", "csinodes", ""}:                        verbGet | verbCreate | verbUpdate | verbPatch | verbDelete,
	{"node.k8s.io", "runtimeclasses", ""}:                     read,
	{"resource.k8s.io", "resourceclaims", ""}:                 verbGet,
	{"resource.k8s.io", "resourceslices", ""}:                 verbDeleteCollection,
	{"", "serviceaccounts", ""}:                               verbGet,
}
