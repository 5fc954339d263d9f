package hub

import (
	"context"
	"fmt"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	bulkwatch "github.com/nodeproxy/nodeproxy/bulk/watch"
)

// rbacChanges watches kube-apiserver's RBAC objects (ClusterRoles,
// ClusterRoleBindings, Roles, RoleBindings) and reports to the bulk
// watch each change that may take access from someone, naming whom: so
// that an open channel is authorized again only when an answer may have
// changed, not every minute. It only chooses whom to ask; the answer is
// still kube-apiserver's (a SubjectAccessReview).
//
// RBAC only grants, so a creation takes nothing from anyone and is not
// reported. A binding's update takes access only from the subjects it
// drops (its roleRef cannot change); its deletion from all its subjects.
// A role's update that changes its rules (an aggregated ClusterRole's
// rules are rewritten by kube-controller-manager, so its aggregation
// counts), or its deletion, concerns the subjects of every binding that
// references it. The objects are small and few next to the cache's; only
// what these decisions read is kept (managed fields and annotations go).
//
// A change the hub did not see while its RBAC watch was down is seen when
// the watch lists again: the list's difference (a binding gone, a rule
// changed) arrives as deletions and updates.
type rbacChanges struct {
	factory informers.SharedInformerFactory
	crbs    toolscache.SharedIndexInformer
	rbs     toolscache.SharedIndexInformer
	synced  []toolscache.InformerSynced
	recheck func(bulkwatch.Subjects, time.Time)
	now     func() time.Time
}

// byRoleRef indexes bindings by the role they reference:
// "ClusterRole/<name>", or "Role/<namespace>/<name>".
const byRoleRef = "roleRef"

func roleKey(kind, namespace, name string) string {
	if kind == "ClusterRole" {
		return "ClusterRole/" + name
	}
	return kind + "/" + namespace + "/" + name
}

func newRBACChanges(client kubernetes.Interface, recheck func(bulkwatch.Subjects, time.Time)) (*rbacChanges, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(stripRBAC))
	r := &rbacChanges{factory: factory, recheck: recheck, now: time.Now}
	rbac := factory.Rbac().V1()
	r.crbs = rbac.ClusterRoleBindings().Informer()
	r.rbs = rbac.RoleBindings().Informer()
	if err := r.crbs.AddIndexers(toolscache.Indexers{byRoleRef: func(obj any) ([]string, error) {
		b := obj.(*rbacv1.ClusterRoleBinding)
		return []string{roleKey(b.RoleRef.Kind, "", b.RoleRef.Name)}, nil
	}}); err != nil {
		return nil, fmt.Errorf("index ClusterRoleBindings by role: %w", err)
	}
	if err := r.rbs.AddIndexers(toolscache.Indexers{byRoleRef: func(obj any) ([]string, error) {
		b := obj.(*rbacv1.RoleBinding)
		return []string{roleKey(b.RoleRef.Kind, b.Namespace, b.RoleRef.Name)}, nil
	}}); err != nil {
		return nil, fmt.Errorf("index RoleBindings by role: %w", err)
	}
	handlers := []struct {
		informer toolscache.SharedIndexInformer
		kind     string
		update   func(old, new any) bulkwatch.Subjects
		deleted  func(obj any) bulkwatch.Subjects
	}{
		{r.crbs, "ClusterRoleBinding",
			func(old, new any) bulkwatch.Subjects {
				return lostSubjects("", old.(*rbacv1.ClusterRoleBinding).Subjects, new.(*rbacv1.ClusterRoleBinding).Subjects)
			},
			func(obj any) bulkwatch.Subjects { return subjectsOf("", obj.(*rbacv1.ClusterRoleBinding).Subjects) }},
		{r.rbs, "RoleBinding",
			func(old, new any) bulkwatch.Subjects {
				o, n := old.(*rbacv1.RoleBinding), new.(*rbacv1.RoleBinding)
				return lostSubjects(n.Namespace, o.Subjects, n.Subjects)
			},
			func(obj any) bulkwatch.Subjects {
				b := obj.(*rbacv1.RoleBinding)
				return subjectsOf(b.Namespace, b.Subjects)
			}},
		{rbac.ClusterRoles().Informer(), "ClusterRole",
			func(old, new any) bulkwatch.Subjects {
				o, n := old.(*rbacv1.ClusterRole), new.(*rbacv1.ClusterRole)
				if equality.Semantic.DeepEqual(o.Rules, n.Rules) {
					return bulkwatch.Subjects{}
				}
				return r.boundTo(roleKey("ClusterRole", "", n.Name))
			},
			func(obj any) bulkwatch.Subjects {
				return r.boundTo(roleKey("ClusterRole", "", obj.(*rbacv1.ClusterRole).Name))
			}},
		{rbac.Roles().Informer(), "Role",
			func(old, new any) bulkwatch.Subjects {
				o, n := old.(*rbacv1.Role), new.(*rbacv1.Role)
				if equality.Semantic.DeepEqual(o.Rules, n.Rules) {
					return bulkwatch.Subjects{}
				}
				return r.boundTo(roleKey("Role", n.Namespace, n.Name))
			},
			func(obj any) bulkwatch.Subjects {
				role := obj.(*rbacv1.Role)
				return r.boundTo(roleKey("Role", role.Namespace, role.Name))
			}},
	}
	for _, h := range handlers {
		kind, update, deleted := h.kind, h.update, h.deleted
		reg, err := h.informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, new any) { r.report(kind, "update", update(old, new)) },
			DeleteFunc: func(obj any) {
				if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				r.report(kind, "delete", deleted(obj))
			},
		})
		if err != nil {
			return nil, fmt.Errorf("watch %ss: %w", kind, err)
		}
		r.synced = append(r.synced, reg.HasSynced)
	}
	return r, nil
}

// boundTo names the subjects of every binding that references role.
func (r *rbacChanges) boundTo(role string) bulkwatch.Subjects {
	var s bulkwatch.Subjects
	add := func(o bulkwatch.Subjects) {
		if s.Users == nil {
			s = o
			return
		}
		s.Users.Insert(o.Users.UnsortedList()...)
		s.Groups.Insert(o.Groups.UnsortedList()...)
	}
	crbs, _ := r.crbs.GetIndexer().ByIndex(byRoleRef, role)
	for _, obj := range crbs {
		add(subjectsOf("", obj.(*rbacv1.ClusterRoleBinding).Subjects))
	}
	rbs, _ := r.rbs.GetIndexer().ByIndex(byRoleRef, role)
	for _, obj := range rbs {
		b := obj.(*rbacv1.RoleBinding)
		add(subjectsOf(b.Namespace, b.Subjects))
	}
	return s
}

// report hands a change's subjects to the bulk watch, and counts it.
func (r *rbacChanges) report(kind, change string, s bulkwatch.Subjects) {
	if s.Empty() {
		rbacChangesSeen.WithLabelValues(kind, change, "nobody").Inc()
		return
	}
	rbacChangesSeen.WithLabelValues(kind, change, "recheck").Inc()
	klog.V(4).InfoS("RBAC change may take access; re-checking the channels of the users it names", "kind", kind, "change", change,
		"users", s.Users.Len(), "groups", s.Groups.Len())
	r.recheck(s, r.now())
}

// run starts the informers and, once every one has listed, calls
// watched: from then on every RBAC change is reported.
func (r *rbacChanges) run(ctx context.Context, watched func()) {
	r.factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return
	}
	klog.InfoS("Watching RBAC: open bulk watch channels are authorized again when a change names their user")
	watched()
}

// stripRBAC keeps of an RBAC object what rbacChanges reads: its managed
// fields and annotations (kubectl's last-applied configuration repeats
// the whole object) go.
func stripRBAC(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
		m.SetAnnotations(nil)
	}
	return obj, nil
}
