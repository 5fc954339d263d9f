package passthrough_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/passthrough"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestUncachedWatchReopensOnKubeAPIServersTimeout: kube-apiserver ends an
// upstream watch at its timeoutSeconds (here 1 s, so that it happens
// several times while Deployments change); the relay watches again from
// the last resourceVersion it passed on, and the channel receives every
// change once, in order, and never ends. Run in-process as the hub's
// ServiceAccount, with the package's impersonation grant, for alice.
func TestUncachedWatchReopensOnKubeAPIServersTimeout(t *testing.T) {
	startHub(t) // the grant, the seed objects
	cfg, err := cp.UserConfig(testserver.ServiceAccount, "system:serviceaccounts", "system:serviceaccounts:nodeproxy")
	if err != nil {
		t.Fatal(err)
	}
	c, err := passthrough.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	passthrough.SetWatchTimeout(c, time.Second)
	typ, found, err := c.Resolve(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"})
	if err != nil || !found {
		t.Fatalf("resolve deployments: %v %v", found, err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := admin.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alice := request.WithUser(ctx, &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}})
	sink := &versions{closed: make(chan struct{})}
	run, err := c.Watch(alice, typ, ns, metav1.ListOptions{FieldSelector: "metadata.name=web", ResourceVersion: d.ResourceVersion}, sink)
	if err != nil {
		t.Fatal(err)
	}
	before := passthrough.Reopened()
	go run()

	var want []string
	for i := range 8 { // about 4 s: three or four upstream timeouts
		patched, err := admin.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"reopen":"`+strconv.Itoa(i)+`-`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, "MODIFIED "+patched.ResourceVersion)
		time.Sleep(500 * time.Millisecond) // the point: changes on both sides of kube-apiserver's timeouts
	}
	testserver.Eventually(t, 20*time.Second, "every change relayed", func(context.Context) error {
		if got := sink.got(); len(got) < len(want) {
			return &incomplete{len(got), len(want)}
		}
		return nil
	})
	if got := sink.got(); len(got) != len(want) || !equal(got, want) {
		t.Fatalf("relayed %v, want %v: each change once, in order", got, want)
	}
	select {
	case <-sink.closed:
		t.Fatalf("the channel ended: %+v", sink.final)
	default:
	}
	if n := passthrough.Reopened() - before; n < 2 {
		t.Errorf("%v upstream watches re-opened over about 4 s of 1 s timeouts, want at least 2", n)
	}
}

type incomplete struct{ got, want int }

func (e *incomplete) Error() string {
	return strconv.Itoa(e.got) + " of " + strconv.Itoa(e.want) + " changes"
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// versions is a Sink that keeps the type and resourceVersion of each
// event other than a bookmark.
type versions struct {
	mu     sync.Mutex
	events []string
	final  *metav1.Status
	closed chan struct{}
	once   sync.Once
}

func (v *versions) Send(t watch.EventType, object []byte) bool {
	if t == watch.Bookmark {
		return true
	}
	var o struct{ Metadata metav1.ObjectMeta }
	_ = json.Unmarshal(object, &o)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.events = append(v.events, string(t)+" "+o.Metadata.ResourceVersion)
	return true
}

func (v *versions) OnClose(func()) {}

func (v *versions) Close(s *metav1.Status) {
	v.once.Do(func() {
		v.mu.Lock()
		v.final = s
		v.mu.Unlock()
		close(v.closed)
	})
}

func (v *versions) got() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.events...)
}
