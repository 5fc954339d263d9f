package hub

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// TestBindingSubjectsNameTheUsersRBACGrantsTo: a binding's subjects name
// the callers kube-apiserver's RBAC would grant its role to, and only
// those: the users whose open channels a change of it makes due for a
// re-check.
func TestBindingSubjectsNameTheUsersRBACGrantsTo(t *testing.T) {
	proxy := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:kube-proxy",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", user.AllAuthenticated}}
	node := &user.DefaultInfo{Name: "system:node:n1", Groups: []string{user.NodesGroup, user.AllAuthenticated}}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"devs", user.AllAuthenticated}}
	sa := func(ns, name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
	}
	u := func(name string) rbacv1.Subject {
		return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}
	}
	g := func(name string) rbacv1.Subject {
		return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: name}
	}
	for _, tc := range []struct {
		name      string
		namespace string // the RoleBinding's; "" for a ClusterRoleBinding
		subjects  []rbacv1.Subject
		matches   []user.Info
		not       []user.Info
	}{
		{"a ServiceAccount by its user name", "", []rbacv1.Subject{sa("kube-system", "kube-proxy")}, []user.Info{proxy}, []user.Info{node, bob}},
		{"a ServiceAccount of another namespace", "", []rbacv1.Subject{sa("default", "kube-proxy")}, nil, []user.Info{proxy, node, bob}},
		{"a RoleBinding's ServiceAccount without a namespace is of the binding's", "kube-system", []rbacv1.Subject{sa("", "kube-proxy")}, []user.Info{proxy}, []user.Info{node, bob}},
		{"a ClusterRoleBinding's ServiceAccount without a namespace is nobody", "", []rbacv1.Subject{sa("", "kube-proxy")}, nil, []user.Info{proxy, node, bob}},
		{"a user by name", "", []rbacv1.Subject{u("bob")}, []user.Info{bob}, []user.Info{proxy, node}},
		{"a user named as a ServiceAccount's user name is that account", "", []rbacv1.Subject{u("system:serviceaccount:kube-system:kube-proxy")}, []user.Info{proxy}, []user.Info{node, bob}},
		{"a group by membership", "", []rbacv1.Subject{g("devs")}, []user.Info{bob}, []user.Info{proxy, node}},
		{"the nodes' group", "", []rbacv1.Subject{g(user.NodesGroup)}, []user.Info{node}, []user.Info{proxy, bob}},
		{"every ServiceAccount", "", []rbacv1.Subject{g("system:serviceaccounts")}, []user.Info{proxy}, []user.Info{node, bob}},
		{"a namespace's ServiceAccounts", "", []rbacv1.Subject{g("system:serviceaccounts:kube-system")}, []user.Info{proxy}, []user.Info{node, bob}},
		{"another namespace's ServiceAccounts", "", []rbacv1.Subject{g("system:serviceaccounts:default")}, nil, []user.Info{proxy, node, bob}},
		{"everyone authenticated", "", []rbacv1.Subject{g(user.AllAuthenticated)}, []user.Info{proxy, node, bob}, nil},
		{"a group is not a user of that name", "", []rbacv1.Subject{g("bob")}, nil, []user.Info{bob}},
		{"an unknown kind names nobody", "", []rbacv1.Subject{{Kind: "Robot", Name: "bob"}}, nil, []user.Info{proxy, node, bob}},
		{"several subjects", "default", []rbacv1.Subject{u("bob"), sa("kube-system", "kube-proxy")}, []user.Info{bob, proxy}, []user.Info{node}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := subjectsOf(tc.namespace, tc.subjects)
			for _, who := range tc.matches {
				if !s.Matches(who) {
					t.Errorf("%s is not named, want named", who.GetName())
				}
			}
			for _, who := range tc.not {
				if s.Matches(who) {
					t.Errorf("%s is named, want not", who.GetName())
				}
			}
		})
	}
}

// TestBindingUpdateNamesOnlyTheSubjectsItDropped: an update of a binding
// can take access only from the subjects it no longer names.
func TestBindingUpdateNamesOnlyTheSubjectsItDropped(t *testing.T) {
	bob := rbacv1.Subject{Kind: rbacv1.UserKind, Name: "bob"}
	ops := rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "ops"}
	carol := rbacv1.Subject{Kind: rbacv1.UserKind, Name: "carol"}
	for _, tc := range []struct {
		name     string
		old, new []rbacv1.Subject
		users    []string
		groups   []string
	}{
		{"nothing dropped", []rbacv1.Subject{bob}, []rbacv1.Subject{bob, carol}, nil, nil},
		{"a user dropped", []rbacv1.Subject{bob, carol}, []rbacv1.Subject{carol}, []string{"bob"}, nil},
		{"a group dropped", []rbacv1.Subject{bob, ops}, []rbacv1.Subject{bob}, nil, []string{"ops"}},
		{"all dropped", []rbacv1.Subject{bob, ops}, nil, []string{"bob"}, []string{"ops"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := lostSubjects("", tc.old, tc.new)
			if len(tc.users) != s.Users.Len() || !s.Users.HasAll(tc.users...) || len(tc.groups) != s.Groups.Len() || !s.Groups.HasAll(tc.groups...) {
				t.Errorf("lost users %v groups %v, want %v %v", s.Users.UnsortedList(), s.Groups.UnsortedList(), tc.users, tc.groups)
			}
		})
	}
}
