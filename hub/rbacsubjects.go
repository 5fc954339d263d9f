package hub

import (
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	bulkwatch "github.com/nodeproxy/nodeproxy/bulk/watch"
)

// subjectsOf names the users a binding's subjects grant to, as
// kube-apiserver's RBAC matches them to a caller: a User by name, a Group
// by the caller's groups, a ServiceAccount by its user name
// (system:serviceaccount:<namespace>:<name>), its namespace defaulting to
// the RoleBinding's (namespace is "" for a ClusterRoleBinding, where a
// ServiceAccount without one names nobody). Other kinds name nobody.
func subjectsOf(namespace string, subjects []rbacv1.Subject) bulkwatch.Subjects {
	s := bulkwatch.Subjects{Users: sets.New[string](), Groups: sets.New[string]()}
	for _, sub := range subjects {
		switch sub.Kind {
		case rbacv1.UserKind:
			s.Users.Insert(sub.Name)
		case rbacv1.GroupKind:
			s.Groups.Insert(sub.Name)
		case rbacv1.ServiceAccountKind:
			ns := sub.Namespace
			if ns == "" {
				ns = namespace
			}
			if ns != "" {
				s.Users.Insert(serviceaccount.MakeUsername(ns, sub.Name))
			}
		}
	}
	return s
}

// lostSubjects are the subjects of old that new no longer names: the only
// ones a binding's update can take access from, since its roleRef cannot
// change and RBAC only grants.
func lostSubjects(namespace string, old, new []rbacv1.Subject) bulkwatch.Subjects {
	before, after := subjectsOf(namespace, old), subjectsOf(namespace, new)
	return bulkwatch.Subjects{Users: before.Users.Difference(after.Users), Groups: before.Groups.Difference(after.Groups)}
}
