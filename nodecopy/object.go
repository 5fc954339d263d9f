package nodecopy

import (
	"encoding/json"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// Object is one object of the copy: the hub's bytes, which are what the
// kubelet is sent, and what the copy reads of them to select and order.
type Object struct {
	Namespace, Name string
	// RV is the object's resourceVersion.
	RV     uint64
	Labels map[string]string
	// NodeName is a pod's spec.nodeName.
	NodeName string
	// ClusterIP and ServiceType are a service's spec.clusterIP and
	// spec.type, which the kubelet and kube-proxy select on.
	ClusterIP, ServiceType string
	// Raw is the object as the hub sent it, which is what the kubelet
	// is sent when it asks for that encoding: kube-apiserver's protobuf
	// (IsProtobuf: the endpoint's view asks for it) or JSON with
	// apiVersion and kind (a hub of an earlier release, what the node
	// observed of kube-apiserver).
	Raw []byte
}

type objKey struct{ namespace, name string }

func (o *Object) key() objKey { return objKey{o.Namespace, o.Name} }

// head is what the copy reads of an object: its type, its metadata, and a
// pod's node. Unmarshalling into it skips the rest of the object.
type head struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Namespace       string            `json:"namespace"`
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		NodeName  string `json:"nodeName"`
		ClusterIP string `json:"clusterIP"`
		Type      string `json:"type"`
	} `json:"spec"`
}

// parseObject reads raw, one of the view's objects in either encoding
// (its magic says which), and returns it with
// the index of its type in v1alpha1.NodeViewTypes.
func parseObject(raw []byte) (int, *Object, error) {
	var h head
	if IsProtobuf(raw) {
		var err error
		if h, err = protobufHead(raw); err != nil {
			return -1, nil, fmt.Errorf("an object that is not protobuf: %w", err)
		}
	} else if err := json.Unmarshal(raw, &h); err != nil {
		return -1, nil, fmt.Errorf("an object that is not JSON: %w", err)
	}
	i := typeOfKind(h.APIVersion, h.Kind)
	if i < 0 {
		return -1, nil, fmt.Errorf("%s %s is not a type of the node view", h.APIVersion, h.Kind)
	}
	if h.Metadata.Name == "" {
		return -1, nil, fmt.Errorf("a %s without a name", h.Kind)
	}
	if (h.Metadata.Namespace != "") != v1alpha1.NodeViewTypes[i].Namespaced {
		return -1, nil, fmt.Errorf("%s %s/%s: namespace does not fit the type", h.Kind, h.Metadata.Namespace, h.Metadata.Name)
	}
	rv, err := strconv.ParseUint(h.Metadata.ResourceVersion, 10, 64)
	if err != nil {
		return -1, nil, fmt.Errorf("%s %s/%s: resourceVersion %q: %w", h.Kind, h.Metadata.Namespace, h.Metadata.Name, h.Metadata.ResourceVersion, err)
	}
	return i, &Object{
		Namespace: h.Metadata.Namespace, Name: h.Metadata.Name, RV: rv,
		Labels: h.Metadata.Labels, NodeName: h.Spec.NodeName, Raw: raw,
		ClusterIP: h.Spec.ClusterIP, ServiceType: h.Spec.Type,
	}, nil
}

// typeOfKind is the index in v1alpha1.NodeViewTypes of the type
// apiVersion and kind name; -1 if the view has no such type.
func typeOfKind(apiVersion, kind string) int {
	for i, t := range v1alpha1.NodeViewTypes {
		gv := t.Version
		if t.Group != "" {
			gv = t.Group + "/" + t.Version
		}
		if t.Kind == kind && gv == apiVersion {
			return i
		}
	}
	return -1
}

// TypeIndex is the index in v1alpha1.NodeViewTypes of group and resource,
// -1 if the view does not carry it.
func TypeIndex(group, resource string) int {
	i := v1alpha1.NodeViewTypeIndex(resource)
	if i < 0 || v1alpha1.NodeViewTypes[i].Group != group {
		return -1
	}
	return i
}

// SelectableFields are the fields a field selector may name for objects
// of the view's resource, as kube-apiserver's field selectors of the type
// have them; the copy evaluates no other.
func SelectableFields(resource string) []string {
	switch resource {
	case "pods":
		return []string{"metadata.name", "metadata.namespace", "spec.nodeName"}
	case "services":
		return []string{"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}
	}
	return []string{"metadata.name", "metadata.namespace"}
}

// fieldSet is o's selectable fields.
func (o *Object) fieldSet() fields.Set {
	s := fields.Set{"metadata.name": o.Name, "metadata.namespace": o.Namespace}
	if o.NodeName != "" {
		s["spec.nodeName"] = o.NodeName
	}
	if o.ClusterIP != "" || o.ServiceType != "" {
		s["spec.clusterIP"], s["spec.type"] = o.ClusterIP, o.ServiceType
	}
	return s
}
