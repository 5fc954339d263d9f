package cache

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// TestScripts runs the scenarios under testdata/. Each drives one pod
// store (the indexed kind) through lists, changes and bookmarks, and
// prints what readers see: lists, the changes after a resourceVersion,
// and the state at one. Regenerate expectations with:
//
//	go test ./cache -run TestScripts -rewrite
//
// Commands:
//
//	replace rv=N ns/name@rv[:node][~uid] ... a relist at N
//	add|update ns/name@rv[:node]          a watch event
//	delete ns/name@rv                     a deletion at rv
//	bookmark rv=N
//	restart-log-on-relist                 Options.RestartLogOnRelist from here on
//	list [ns=NS] [node=N]                 current snapshot
//	changes since=N                       events a watch from N gets
//	at rv=N                               the state at N
//	handler                               what the handler saw, and
//	                                      whether readers saw it first
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := newStore(served[0], 4)
		var seen []string
		s.AddHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(obj interface{}) {
				seen = append(seen, "add "+keyOf(obj)+visible(s, obj))
			},
			UpdateFunc: func(_, obj interface{}) {
				seen = append(seen, "update "+keyOf(obj)+visible(s, obj))
			},
			DeleteFunc: func(obj interface{}) {
				seen = append(seen, "delete "+keyOf(obj)+gone(s, obj))
			},
		})
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := map[string]string{}
			var objs []string
			for _, a := range d.CmdArgs {
				if strings.Contains(a.Key, "/") {
					objs = append(objs, a.Key)
					continue
				}
				args[a.Key] = strings.Join(a.Vals, ",")
			}
			var err error
			switch d.Cmd {
			case "replace":
				var list []interface{}
				for _, o := range objs {
					list = append(list, scriptPod(t, o))
				}
				err = s.Replace(list, args["rv"])
			case "add":
				err = s.Add(scriptPod(t, objs[0]))
			case "update":
				err = s.Update(scriptPod(t, objs[0]))
			case "delete":
				err = s.Delete(scriptPod(t, objs[0]))
			case "bookmark":
				err = s.Bookmark(args["rv"])
			case "restart-log-on-relist":
				s.restartLogOnRelist = true
			case "list":
				return listDump(s.Snapshot(), args["ns"], args["node"])
			case "changes":
				events, err := s.Snapshot().Changes(num(t, args["since"]))
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				var b strings.Builder
				for _, e := range events {
					fmt.Fprintf(&b, "%s %s/%s@%d (prev rv %d)\n", e.Type, e.Object.Namespace, e.Object.Name, e.RV, e.PrevRV)
				}
				if b.Len() == 0 {
					return "none\n"
				}
				return b.String()
			case "at":
				snap, err := s.Snapshot().At(num(t, args["rv"]))
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return listDump(snap, "", "")
			case "handler":
				out := strings.Join(seen, "\n") + "\n"
				seen = nil
				return out
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			}
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return ""
		})
	})
}

// scriptPod parses ns/name@rv[:node][~uid].
func scriptPod(t *testing.T, spec string) *corev1.Pod {
	t.Helper()
	spec, uid, _ := strings.Cut(spec, "~")
	key, rest, _ := strings.Cut(spec, "@")
	rv, node, _ := strings.Cut(rest, ":")
	ns, name, _ := strings.Cut(key, "/")
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

func keyOf(obj interface{}) string {
	p := obj.(*corev1.Pod)
	return p.Namespace + "/" + p.Name + "@" + p.ResourceVersion
}

// visible says whether readers could already see the change the handler
// is being told about; they must not.
func visible(s *Store, obj interface{}) string {
	p := obj.(*corev1.Pod)
	if o, ok := s.Snapshot().Get(p.Namespace, p.Name); ok && strconv.FormatUint(o.RV, 10) == p.ResourceVersion {
		return " (already visible to readers!)"
	}
	return ""
}

// gone says whether readers had already lost the object the handler is
// being told is deleted; they must not.
func gone(s *Store, obj interface{}) string {
	p := obj.(*corev1.Pod)
	if _, ok := s.Snapshot().Get(p.Namespace, p.Name); !ok {
		return " (already gone for readers!)"
	}
	return ""
}

func listDump(s *Snapshot, ns, node string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rv %d:", s.RV)
	print := func(o *Object) bool {
		fmt.Fprintf(&b, " %s/%s@%d", o.Namespace, o.Name, o.RV)
		if o.NodeName != "" {
			fmt.Fprintf(&b, ":%s", o.NodeName)
		}
		return true
	}
	if node != "" {
		s.AscendNode(node, ns, ns, "", print)
	} else {
		s.Ascend(ns, ns, "", print)
	}
	return b.String() + "\n"
}

func num(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
