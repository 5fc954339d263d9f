package cache

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/google/btree"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// TestRelistOfAnEtcdHistoryNeedsNoSharedVersion plays random histories as
// kube-apiserver's etcd writes them (one revision per create, update or
// delete, other types' writes in between, names deleted and created
// again) while a store hears nothing, then relists. Every relist must be
// carried on with one event a version, in increasing order, each DELETED
// of a reused name before its ADDED, and leave the state equal to the
// list: etcd spent a revision on every deletion, so the versions always
// suffice, and relists of kube-apiserver never share one.
func TestRelistOfAnEtcdHistoryNeedsNoSharedVersion(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		rv := uint64(10)
		uids := 0
		live := map[string]*corev1.Pod{}
		write := func(name string) {
			rv++
			uids++
			live[name] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name,
				ResourceVersion: strconv.FormatUint(rv, 10), UID: types.UID(strconv.Itoa(uids))}}
		}
		for i := range r.IntN(6) {
			write(fmt.Sprintf("p%d", i))
		}
		old := tree(t, live)
		prevRV := rv + uint64(r.IntN(3)) // a bookmark may have moved the store on
		rv = prevRV
		for range r.IntN(12) {
			name := fmt.Sprintf("p%d", r.IntN(8))
			p, ok := live[name]
			switch op := r.IntN(4); {
			case op == 0:
				rv++ // another type's write
			case !ok:
				write(name)
			case op == 1: // updated
				rv++
				p = p.DeepCopy()
				p.ResourceVersion = strconv.FormatUint(rv, 10)
				live[name] = p
			case op == 2: // deleted
				rv++
				delete(live, name)
			default: // deleted and created again under its name
				rv++
				delete(live, name)
				write(name)
			}
		}
		listRV := rv + uint64(r.IntN(2))
		list := tree(t, live)
		got, reason := relistChanges(old, list, prevRV, listRV, metadataSpecStatus)
		if reason != "" {
			t.Fatalf("round %d: the relist from %d to %d started the log over: %s", round, prevRV, listRV, reason)
		}
		if shared := got.deletions[0][1] + got.deletions[1][1]; shared > 0 {
			t.Fatalf("round %d: %d deletions share a version", round, shared)
		}
		state := old.Clone()
		last := prevRV
		for _, e := range got.changes {
			if e.RV <= last || e.RV > listRV {
				t.Fatalf("round %d: %s %s at %d after %d, list at %d: out of order", round, e.Type, e.Object.Name, e.RV, last, listRV)
			}
			last = e.RV
			held, ok := state.Get(e.Object)
			switch e.Type {
			case watch.Added:
				if ok {
					t.Fatalf("round %d: ADDED %s@%d while %s@%d is held", round, e.Object.Name, e.RV, held.Name, held.RV)
				}
				state.ReplaceOrInsert(e.Object)
			case watch.Modified:
				if !ok || uid(held) != uid(e.Object) {
					t.Fatalf("round %d: MODIFIED %s@%d of another object", round, e.Object.Name, e.RV)
				}
				state.ReplaceOrInsert(e.Object)
			case watch.Deleted:
				if !ok || uid(held) != uid(e.Object) {
					t.Fatalf("round %d: DELETED %s@%d of an object not held", round, e.Object.Name, e.RV)
				}
				state.Delete(e.Object)
			}
		}
		if a, b := dump(state), dump(list); a != b {
			t.Fatalf("round %d: the events leave\n  %s\nthe list is\n  %s", round, a, b)
		}
	}
}

func tree(t *testing.T, pods map[string]*corev1.Pod) *btree.BTreeG[*Object] {
	t.Helper()
	tr := btree.NewG(btreeDegree, byKey)
	for _, p := range pods {
		o, err := newObject(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		tr.ReplaceOrInsert(o)
	}
	return tr
}

func dump(tr *btree.BTreeG[*Object]) string {
	s := ""
	tr.Ascend(func(o *Object) bool {
		s += fmt.Sprintf(" %s@%d~%s", o.Name, o.RV, uid(o))
		return true
	})
	return s
}
