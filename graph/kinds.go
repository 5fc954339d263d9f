package graph

import "fmt"

// Kind is the type of an object in the graph.
type Kind uint8

// The kinds of objects whose reachability the graph tracks. Nodes are not
// among them: a node is where paths end, named by string.
const (
	Pod Kind = iota + 1
	Secret
	ConfigMap
	ServiceAccount
	PersistentVolumeClaim
	PersistentVolume
	ResourceClaim
	VolumeAttachment
	ResourceSlice

	numKinds = iota + 1
)

var kindNames = [numKinds]string{
	Pod:                   "pod",
	Secret:                "secret",
	ConfigMap:             "configmap",
	ServiceAccount:        "serviceaccount",
	PersistentVolumeClaim: "persistentvolumeclaim",
	PersistentVolume:      "persistentvolume",
	ResourceClaim:         "resourceclaim",
	VolumeAttachment:      "volumeattachment",
	ResourceSlice:         "resourceslice",
}

func (k Kind) String() string {
	if k == 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("Kind(%d)", k)
	}
	return kindNames[k]
}

// Kinds lists every kind, in order.
func Kinds() []Kind {
	return []Kind{Pod, Secret, ConfigMap, ServiceAccount, PersistentVolumeClaim, PersistentVolume, ResourceClaim, VolumeAttachment, ResourceSlice}
}

// ObjectRef names an object. Namespace is empty for cluster-scoped kinds
// (PersistentVolume, VolumeAttachment, ResourceSlice).
type ObjectRef struct {
	Kind      Kind
	Namespace string
	Name      string
}

func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return r.Kind.String() + " " + r.Name
	}
	return r.Kind.String() + " " + r.Namespace + "/" + r.Name
}
