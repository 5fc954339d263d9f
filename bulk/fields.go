package bulk

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeproxy/nodeproxy/cache"
)

// Field selectors are read and evaluated the way kube-apiserver 1.36 reads
// and evaluates them, in two steps:
//
//  1. Conversion (the field label conversion of the type's version,
//     k8s.io/kubernetes pkg/apis/<group>/<version>/conversion.go): a field
//     the type does not know is refused with 400 Bad Request and the
//     conversion's own words. Types that register none get apimachinery's
//     DefaultMetaV1FieldSelectorConversion: metadata.name and
//     metadata.namespace, even for a cluster-scoped type.
//  2. Evaluation (the registry strategy's GetAttrs): each requirement
//     compares the field's value in the object's field set with =, == or
//     !=. A field accepted by the conversion but absent from the field set
//     (metadata.namespace of a cluster-scoped object) reads as "", so
//     metadata.namespace=x selects nothing there and metadata.namespace!=x
//     everything.
//
// A field kube-apiserver accepts but nodeproxy does not evaluate (most of
// the pod's) is refused with 422, naming what nodeproxy evaluates: it is
// never approximated.

// Field selectors nodeproxy evaluates, besides ReachableFromField.
const (
	fieldName          = "metadata.name"
	fieldNamespace     = "metadata.namespace"
	fieldNodeName      = "spec.nodeName"
	fieldClusterIP     = "spec.clusterIP"
	fieldServiceType   = "spec.type"
	fieldSecretType    = "type"
	fieldUnschedulable = "spec.unschedulable"
)

// selectable is what kube-apiserver selects on for one type.
type selectable struct {
	// known are the fields kube-apiserver's conversion accepts, each with
	// the field it stands for (the pod's spec.host is spec.nodeName).
	known map[string]string
	// evaluated are the fields of known whose values nodeproxy reads.
	evaluated map[string]bool
	// refuse words kube-apiserver's refusal of an unknown field.
	refuse func(field string) string
}

// labelNotSupported is the refusal of the core types that register their
// own conversion.
func labelNotSupported(field string) string { return "field label not supported: " + field }

// defaultRefusal is DefaultMetaV1FieldSelectorConversion's.
func defaultRefusal(field string) string {
	return fmt.Sprintf("%q is not a known field selector: only %q, %q", field, fieldName, fieldNamespace)
}

func fieldsOf(known ...string) map[string]string {
	m := make(map[string]string, len(known))
	for _, f := range known {
		m[f] = f
	}
	return m
}

func set(fields ...string) map[string]bool {
	m := make(map[string]bool, len(fields))
	for _, f := range fields {
		m[f] = true
	}
	return m
}

var (
	// byDefault are the types without a conversion of their own.
	byDefault = selectable{fieldsOf(fieldName, fieldNamespace), set(fieldName, fieldNamespace), defaultRefusal}

	// selectableFields are per resource of cache.Resources (checked by
	// TestEveryServedTypeHasItsFields).
	selectableFields = map[string]selectable{
		"pods": {
			known: func() map[string]string {
				m := fieldsOf(fieldName, fieldNamespace, fieldNodeName, "spec.restartPolicy", "spec.schedulerName",
					"spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
					"status.nominatedNodeName")
				m["spec.host"] = fieldNodeName // for old v1 clients
				return m
			}(),
			evaluated: set(fieldName, fieldNamespace, fieldNodeName),
			refuse:    labelNotSupported,
		},
		"secrets": {fieldsOf(fieldName, fieldNamespace, fieldSecretType), set(fieldName, fieldNamespace, fieldSecretType), labelNotSupported},
		// Node's conversion takes no metadata.namespace.
		"nodes":                  {fieldsOf(fieldName, fieldUnschedulable), set(fieldName, fieldUnschedulable), labelNotSupported},
		"services":               {fieldsOf(fieldName, fieldNamespace, fieldClusterIP, fieldServiceType), set(fieldName, fieldNamespace, fieldClusterIP, fieldServiceType), labelNotSupported},
		"configmaps":             byDefault,
		"persistentvolumeclaims": byDefault,
		"persistentvolumes":      byDefault,
		"serviceaccounts":        byDefault,
		"endpointslices":         byDefault,
		"servicecidrs":           byDefault,
		"runtimeclasses":         byDefault,
		"csidrivers":             byDefault,
	}
)

// fieldValue is field's value in o's field set, as the type's GetAttrs
// makes it; "" for a field the set does not hold. ok is false when o
// cannot be read (Matches then selects nothing rather than guess). The
// key fields are the cache's index (a Secret's type among them); the
// others are read from the typed object, which the type that has them
// (services) keeps decoded, so that a scan never decodes: a type kept as
// bytes selects on its index alone (pods: name, namespace,
// spec.nodeName; secrets: name, namespace, type; nodes: name,
// spec.unschedulable).
func fieldValue(o *cache.Object, field string) (value string, ok bool) {
	switch field {
	case fieldName:
		return o.Name, true
	case fieldNamespace:
		return o.Namespace, true // "" for a cluster-scoped object, as absent
	case fieldNodeName:
		return o.NodeName, true
	case fieldSecretType:
		// Only secrets accept the field (selectableFields).
		return o.SecretType(), true
	case fieldUnschedulable:
		// Only nodes accept the field.
		return strconv.FormatBool(o.Unschedulable()), true
	}
	obj, err := o.Typed()
	if err != nil {
		return "", false
	}
	switch t := obj.(type) {
	case *corev1.Service:
		switch field {
		case fieldClusterIP:
			return t.Spec.ClusterIP, true
		case fieldServiceType:
			return string(t.Spec.Type), true
		}
	}
	return "", true
}
