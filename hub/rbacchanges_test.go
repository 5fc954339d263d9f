package hub

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/fake"

	bulkwatch "github.com/nodeproxy/nodeproxy/bulk/watch"
)

// TestRBACChangesNameWhomTheyMayTakeAccessFrom: each RBAC change is
// reported with the users it may take access from, and only such
// changes: creations grant; a binding's update names the subjects it
// dropped; a role's rules changed, or the role deleted, name the subjects
// of every binding of it (ClusterRoleBindings, and RoleBindings of any
// namespace for a ClusterRole; the RoleBindings of its namespace for a
// Role); a role's update that leaves its rules alone names nobody.
// (Which users are named by which subjects: TestBindingSubjectsNameTheUsersRBACGrantsTo.)
func TestRBACChangesNameWhomTheyMayTakeAccessFrom(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	var mu sync.Mutex
	var reported []bulkwatch.Subjects
	r, err := newRBACChanges(client, func(s bulkwatch.Subjects, _ time.Time) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, s)
	})
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan struct{})
	go r.run(ctx, func() { close(watched) })
	<-watched

	rbac := client.RbacV1()
	setUpMarkers(t, ctx, client)
	user := func(name string) rbacv1.Subject { return rbacv1.Subject{Kind: rbacv1.UserKind, Name: name} }
	rules := func(resources ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: []string{"watch"}}}
	}
	agg := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agg"}, Rules: rules("services")}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "reader"}, Rules: rules("configmaps")}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "crb"},
		RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "agg"}, Subjects: []rbacv1.Subject{user("alice"), user("bob")}}
	rbOfCluster := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns2", Name: "rb"},
		RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "agg"}, Subjects: []rbacv1.Subject{user("carol")}}
	rbOfRole := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "rb"},
		RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "reader"}, Subjects: []rbacv1.Subject{user("dave")}}
	// A Role of the same name in another namespace: its binding is not
	// the Role's.
	rbOfOtherRole := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns2", Name: "rb-reader"},
		RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "reader"}, Subjects: []rbacv1.Subject{user("erin")}}

	for _, step := range []struct {
		name   string
		change func() error
		want   []string // the users reported; nil: no report
	}{
		{"creations grant", func() error {
			for _, create := range []func() error{
				func() error { _, err := rbac.ClusterRoles().Create(ctx, agg, metav1.CreateOptions{}); return err },
				func() error { _, err := rbac.Roles("ns1").Create(ctx, role, metav1.CreateOptions{}); return err },
				func() error {
					_, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
					return err
				},
				func() error {
					_, err := rbac.RoleBindings("ns2").Create(ctx, rbOfCluster, metav1.CreateOptions{})
					return err
				},
				func() error {
					_, err := rbac.RoleBindings("ns1").Create(ctx, rbOfRole, metav1.CreateOptions{})
					return err
				},
				func() error {
					_, err := rbac.RoleBindings("ns2").Create(ctx, rbOfOtherRole, metav1.CreateOptions{})
					return err
				},
			} {
				if err := create(); err != nil {
					return err
				}
			}
			return nil
		}, nil},
		{"a ClusterRole's labels changed", func() error {
			c := agg.DeepCopy()
			c.Labels = map[string]string{"team": "a"}
			_, err := rbac.ClusterRoles().Update(ctx, c, metav1.UpdateOptions{})
			return err
		}, nil},
		{"a ClusterRole's rules changed (as the aggregation controller does)", func() error {
			c := agg.DeepCopy()
			c.Rules = rules("services", "endpoints")
			_, err := rbac.ClusterRoles().Update(ctx, c, metav1.UpdateOptions{})
			return err
		}, []string{"alice", "bob", "carol"}},
		{"a Role's rules changed", func() error {
			c := role.DeepCopy()
			c.Rules = rules("secrets")
			_, err := rbac.Roles("ns1").Update(ctx, c, metav1.UpdateOptions{})
			return err
		}, []string{"dave"}},
		{"a subject added to a binding", func() error {
			c := crb.DeepCopy()
			c.Subjects = append(c.Subjects, user("frank"))
			_, err := rbac.ClusterRoleBindings().Update(ctx, c, metav1.UpdateOptions{})
			return err
		}, nil},
		{"a subject dropped from a binding", func() error {
			c := crb.DeepCopy()
			c.Subjects = []rbacv1.Subject{user("alice")}
			_, err := rbac.ClusterRoleBindings().Update(ctx, c, metav1.UpdateOptions{})
			return err
		}, []string{"bob", "frank"}},
		{"a RoleBinding deleted", func() error {
			return rbac.RoleBindings("ns2").Delete(ctx, "rb-reader", metav1.DeleteOptions{})
		}, []string{"erin"}},
		{"a ClusterRole deleted", func() error {
			return rbac.ClusterRoles().Delete(ctx, "agg", metav1.DeleteOptions{})
		}, []string{"alice", "carol"}},
	} {
		mu.Lock()
		reported = nil
		mu.Unlock()
		if err := step.change(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got := afterMarkers(t, ctx, client, func() []bulkwatch.Subjects {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(reported)
		})
		if !got.Equal(sets.New(step.want...)) {
			t.Errorf("%s: reported %v, want %v", step.name, sets.List(got), step.want)
		}
	}
}

// The markers: one change per informer that each reports a user of its
// own, made after a step's changes. An informer delivers in order, so
// once its marker is reported, so is everything it saw of the step.
var markerUsers = []string{"marker:ClusterRole", "marker:Role", "marker:ClusterRoleBinding", "marker:RoleBinding"}

func setUpMarkers(t *testing.T, ctx context.Context, client *fake.Clientset) {
	t.Helper()
	rbac := client.RbacV1()
	subject := func(name string) []rbacv1.Subject { return []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: name}} }
	for _, err := range []error{
		errOf(rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "marker"}}, metav1.CreateOptions{})),
		errOf(rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "marker-of-role"},
			RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "marker"}, Subjects: subject(markerUsers[0])}, metav1.CreateOptions{})),
		errOf(rbac.Roles("markers").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "markers", Name: "marker"}}, metav1.CreateOptions{})),
		errOf(rbac.RoleBindings("markers").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "markers", Name: "marker-of-role"},
			RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "marker"}, Subjects: subject(markerUsers[1])}, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// errOf is the error of a client call, whatever it returned.
func errOf[T any](_ T, err error) error { return err }

// afterMarkers makes the markers' changes, again until every one is
// reported, and returns the users reported but the markers'.
func afterMarkers(t *testing.T, ctx context.Context, client *fake.Clientset, reported func() []bulkwatch.Subjects) sets.Set[string] {
	t.Helper()
	rbac := client.RbacV1()
	subject := func(name string) []rbacv1.Subject { return []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: name}} }
	markers := sets.New(markerUsers...)
	for round, deadline := 0, time.Now().Add(10*time.Second); ; round++ {
		// Rules that differ from the last round's: an update that
		// changes them.
		rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{fmt.Sprint("r", round)}, Verbs: []string{"get"}}}
		for _, err := range []error{
			errOf(rbac.ClusterRoles().Update(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "marker"}, Rules: rules}, metav1.UpdateOptions{})),
			errOf(rbac.Roles("markers").Update(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "markers", Name: "marker"}, Rules: rules}, metav1.UpdateOptions{})),
			errOf(rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "marker"},
				RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "none"}, Subjects: subject(markerUsers[2])}, metav1.CreateOptions{})),
			rbac.ClusterRoleBindings().Delete(ctx, "marker", metav1.DeleteOptions{}),
			errOf(rbac.RoleBindings("markers").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "markers", Name: "marker"},
				RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "none"}, Subjects: subject(markerUsers[3])}, metav1.CreateOptions{})),
			rbac.RoleBindings("markers").Delete(ctx, "marker", metav1.DeleteOptions{}),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
		got := sets.New[string]()
		for _, s := range reported() {
			got.Insert(s.Users.UnsortedList()...)
		}
		if got.IsSuperset(markers) {
			return got.Difference(markers)
		}
		if time.Now().After(deadline) {
			t.Fatalf("markers reported %v of %v within 10 s", sets.List(got.Intersection(markers)), markerUsers)
		}
	}
}
