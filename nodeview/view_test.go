package nodeview

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/graph"
)

// step writes ws to r, steps its views once, and returns what c read.
func step(r *replica, c *consumer, ws ...write) []string {
	r.t.Helper()
	for _, w := range ws {
		r.write(w)
	}
	r.views.Step()
	return c.read()
}

func expect(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got  %s\n want %s", what, strings.Join(got, " | "), strings.Join(want, " | "))
	}
}

func TestInitialStateSendsWhatAPodUsesBeforeThePod(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	for _, w := range []write{
		k.put(podsGVR, pod("p1", "n1", "secret/s1", "configmap/c1", "claim/data", "sa/robot")),
		k.put(podsGVR, pod("p2", "n2", "secret/s2")),
		k.put(secretsGVR, secret("s1", "a")),
		k.put(secretsGVR, secret("s2", "b")),
		k.put(cmGVR, configMap("c1", "a")),
		k.put(saGVR, serviceAccount("robot")),
		k.put(pvcGVR, claim("data")),
		k.put(pvGVR, pv("vol", "data", "csi-creds")),
		k.put(secretsGVR, secret("csi-creds", "x")),
		k.put(nodesGVR, node("n1", "a")),
		k.put(nodesGVR, node("n2", "a")),
		k.put(servicesGVR, service("web")),
		k.put(rcGVR, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"}),
	} {
		r.write(w)
	}
	c := r.open("n1", nil)
	expect(t, "initial state", step(r, c),
		"ADDED Secret ns/csi-creds",
		"ADDED Secret ns/s1",
		"ADDED ConfigMap ns/c1",
		"ADDED ServiceAccount ns/robot",
		"ADDED PersistentVolume vol",
		"ADDED PersistentVolumeClaim ns/data",
		"ADDED Node n1",
		"ADDED Service default/web",
		"ADDED RuntimeClass runc",
		"ADDED Pod ns/p1",
		"BOOKMARK initial-events-end",
	)
}

// TestInitialStateWithholdsWhatTheLiveGraphNoLongerLetsTheNodeReach:
// the graph takes in a change before the cache publishes it, so the
// initial state may name an object the live graph already took away. It
// is not sent, and the consumer is not taken to hold it: a change the
// node may see again enters the view.
func TestInitialStateWithholdsWhatTheLiveGraphNoLongerLetsTheNodeReach(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	for _, w := range []write{
		k.put(secretsGVR, secret("s1", "a")),
		k.put(secretsGVR, secret("s2", "a")),
		k.put(secretsGVR, secret("csi-creds", "x")),
		k.put(pvcGVR, claim("data")),
		k.put(pvGVR, pv("vol", "data", "csi-creds")),
		k.put(podsGVR, pod("p1", "n1", "secret/s1", "secret/s2", "claim/data")),
	} {
		r.write(w)
	}
	s2, vol := secretRef("ns", "s2"), graph.ObjectRef{Kind: graph.PersistentVolume, Name: "vol"}
	live := &denying{Reachability: r.graph, deny: map[graph.ObjectRef]bool{s2: true, vol: true}}
	c := &consumer{t: t, node: "n1", held: map[string]uint64{}}
	c.view = newView("n1", v1alpha1.AllNodeViewTypes, &c.sink, live, r.views)
	r.views.join(c.view, Position{}, false)
	expect(t, "initial state", step(r, c),
		"ADDED Secret ns/csi-creds",
		"ADDED Secret ns/s1",
		"ADDED PersistentVolumeClaim ns/data",
		"ADDED Pod ns/p1",
		"BOOKMARK initial-events-end",
	)
	if got := c.view.objects(); got != 4 {
		t.Errorf("the view counts %d objects of its own, want 4 (2 secrets, the claim, the pod)", got)
	}

	clear(live.deny)
	expect(t, "what was withheld changes, the live graph letting the node reach it",
		step(r, c, k.put(secretsGVR, secret("s2", "b")), k.put(pvGVR, pv("vol", "data", "csi-creds"))),
		"ENTERED Secret ns/s2", "ENTERED PersistentVolume vol", "BOOKMARK")
}

// denying is the live graph but for the objects in deny.
type denying struct {
	Reachability
	deny map[graph.ObjectRef]bool
}

func (d *denying) Reachable(node string, ref graph.ObjectRef) bool {
	return !d.deny[ref] && d.Reachability.Reachable(node, ref)
}

func TestPodArrivesAfterWhatItUses(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	c := r.open("n1", nil)
	expect(t, "empty view", step(r, c), "BOOKMARK initial-events-end")

	expect(t, "a secret no pod of n1 uses", step(r, c, k.put(secretsGVR, secret("s1", "a"))))
	// The configmaps store has not reached the pod's version: the
	// configmap may be on its way, and the pod waits for it.
	expect(t, "a pod using an existing secret and a configmap not yet created",
		step(r, c, k.put(podsGVR, pod("p1", "n1", "secret/s1", "configmap/c1"))))
	expect(t, "the configmap created", step(r, c, k.put(cmGVR, configMap("c1", "a"))),
		"ENTERED Secret ns/s1", "ENTERED ConfigMap ns/c1", "ADDED Pod ns/p1", "BOOKMARK")
	expect(t, "a configmap not created, its store past the pod",
		step(r, c, k.put(podsGVR, pod("p3", "n1", "configmap/none")), k.put(cmGVR, configMap("c9", "a"))),
		"ADDED Pod ns/p3", "BOOKMARK")
	// etcd orders the pod first, the secret after it; the view still sends
	// the secret first, read at the step's position.
	expect(t, "a pod, then its secret, in one step",
		step(r, c, k.put(podsGVR, pod("p2", "n1", "secret/s2")), k.put(secretsGVR, secret("s2", "b"))),
		"ENTERED Secret ns/s2", "ADDED Pod ns/p2", "BOOKMARK")
	expect(t, "the secret updated", step(r, c, k.put(secretsGVR, secret("s1", "a2"))),
		"MODIFIED Secret ns/s1", "BOOKMARK")
}

// TestPodWaitsForAStoreThatLags: the pods store has a pod whose secret,
// created before it, the secrets store has not taken in yet (each type
// has its own watch); the pod waits for it, at most referenceWait.
func TestPodWaitsForAStoreThatLags(t *testing.T) {
	r := newReplica(t, 256)
	now := time.Unix(1000, 0)
	r.views.now = func() time.Time { return now }
	var k cluster
	c := r.open("n1", nil)
	step(r, c)
	s, p := k.put(secretsGVR, secret("s", "a")), k.put(podsGVR, pod("p", "n1", "secret/s"))
	expect(t, "the pod, its secret still on its way", step(r, c, p))
	expect(t, "the secret arrives", step(r, c, s), "ENTERED Secret ns/s", "ADDED Pod ns/p", "BOOKMARK")

	p2 := k.put(podsGVR, pod("p2", "n1", "secret/late"))
	expect(t, "a pod whose secret never comes", step(r, c, p2))
	now = now.Add(referenceWait - time.Millisecond)
	expect(t, "just before the bound", step(r, c))
	now = now.Add(time.Millisecond)
	expect(t, "at the bound", step(r, c), "ADDED Pod ns/p2", "BOOKMARK")
	expect(t, "the secret after all", step(r, c, k.put(secretsGVR, secret("late", "a"))), "ADDED Secret ns/late", "BOOKMARK")
}

func TestSecretOfAnotherNodeIsNeverInTheView(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	c := r.open("n1", nil)
	step(r, c)
	expect(t, "n2's pod and its secret",
		step(r, c, k.put(podsGVR, pod("p2", "n2", "secret/theirs")), k.put(secretsGVR, secret("theirs", "a"))))
	expect(t, "its secret updated", step(r, c, k.put(secretsGVR, secret("theirs", "b"))))
	expect(t, "n2's pod deleted", step(r, c, k.del(podsGVR, pod("p2", "n2", "secret/theirs"))))
}

func TestDeletingThePodTakesWhatItUsedOut(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	c := r.open("n1", nil)
	step(r, c, k.put(secretsGVR, secret("shared", "a")), k.put(secretsGVR, secret("own", "a")),
		k.put(podsGVR, pod("p1", "n1", "secret/shared", "secret/own")), k.put(podsGVR, pod("p2", "n1", "secret/shared")))
	if got := c.snapshot(); len(got) != 4 {
		t.Fatalf("the view holds %v, want two pods and two secrets", got)
	}
	expect(t, "p1 deleted", step(r, c, k.del(podsGVR, pod("p1", "n1", "secret/shared", "secret/own"))),
		"DELETED Pod ns/p1", "LEFT Secret ns/own", "BOOKMARK")
	expect(t, "the secret it alone used, updated", step(r, c, k.put(secretsGVR, secret("own", "b"))))
	expect(t, "p2 deleted", step(r, c, k.del(podsGVR, pod("p2", "n1", "secret/shared"))),
		"DELETED Pod ns/p2", "LEFT Secret ns/shared", "BOOKMARK")
	expect(t, "a secret deleted while in the view",
		step(r, c, k.put(podsGVR, pod("p3", "n1", "secret/own")), k.del(secretsGVR, secret("own", "b"))),
		"ADDED Pod ns/p3", "BOOKMARK")
}

func TestDeletedSecretStillUsedIsDeletedNotLeft(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	c := r.open("n1", nil)
	step(r, c, k.put(secretsGVR, secret("s", "a")), k.put(podsGVR, pod("p", "n1", "secret/s")))
	expect(t, "the secret deleted", step(r, c, k.del(secretsGVR, secret("s", "a"))),
		"DELETED Secret ns/s", "BOOKMARK")
	expect(t, "created again", step(r, c, k.put(secretsGVR, secret("s", "b"))),
		"ADDED Secret ns/s", "BOOKMARK")
}

func TestVolumeAndItsSecretFollowTheClaim(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	c := r.open("n1", nil)
	step(r, c, k.put(secretsGVR, secret("csi-creds", "a")), k.put(pvcGVR, claim("data")), k.put(pvGVR, pv("vol", "", "csi-creds")))
	expect(t, "a pod using the unbound claim", step(r, c, k.put(podsGVR, pod("p", "n1", "claim/data"))),
		"ENTERED PersistentVolumeClaim ns/data", "ADDED Pod ns/p", "BOOKMARK")
	expect(t, "the volume bound to it", step(r, c, k.put(pvGVR, pv("vol", "data", "csi-creds"))),
		"ENTERED Secret ns/csi-creds", "ENTERED PersistentVolume vol", "BOOKMARK")
	expect(t, "the volume released", step(r, c, k.put(pvGVR, pv("vol", "", "csi-creds"))),
		"LEFT PersistentVolume vol", "LEFT Secret ns/csi-creds", "BOOKMARK")
	expect(t, "bound again", step(r, c, k.put(pvGVR, pv("vol", "data", "csi-creds"))),
		"ENTERED Secret ns/csi-creds", "ENTERED PersistentVolume vol", "BOOKMARK")
	expect(t, "the pod deleted", step(r, c, k.del(podsGVR, pod("p", "n1", "claim/data"))),
		"DELETED Pod ns/p", "LEFT PersistentVolumeClaim ns/data", "LEFT PersistentVolume vol", "LEFT Secret ns/csi-creds", "BOOKMARK")
}

func TestOwnNodeAndClusterWideTypes(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	c := r.open("n1", nil)
	step(r, c)
	expect(t, "nodes", step(r, c, k.put(nodesGVR, node("n1", "a")), k.put(nodesGVR, node("n2", "a")), k.put(nodesGVR, node("n1", "b"))),
		"ADDED Node n1", "MODIFIED Node n1", "BOOKMARK")
	expect(t, "services", step(r, c, k.put(servicesGVR, service("a")), k.put(servicesGVR, service("a")), k.del(servicesGVR, service("a"))),
		"ADDED Service default/a", "MODIFIED Service default/a", "DELETED Service default/a", "BOOKMARK")
}

func TestOnlyTheNodeItselfMayOpenItsView(t *testing.T) {
	for _, tc := range []struct {
		name, user string
		groups     []string
		sel        string
		want       int32
	}{
		{"its own", "system:node:n1", []string{"system:nodes"}, "metadata.name=n1", 0},
		{"another node's", "system:node:n2", []string{"system:nodes"}, "metadata.name=n1", 403},
		{"a user", "alice", []string{"system:masters"}, "metadata.name=n1", 403},
		{"no node named", "system:node:n1", []string{"system:nodes"}, "", 422},
		{"another field", "system:node:n1", []string{"system:nodes"}, "spec.nodeName=n1", 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReplica(t, 16)
			st := openAs(t, r, tc.user, tc.groups, selector(tc.sel, ""))
			if got := codeOf(st); got != tc.want {
				t.Errorf("got %d (%v), want %d", got, st, tc.want)
			}
		})
	}
}

func TestMalformedPositionsAreRefused(t *testing.T) {
	r := newReplica(t, 16)
	full := Position{}.String()
	for _, rv := range []string{
		"12",
		strings.Replace(full, "pods=0", "pods=x", 1),
		strings.Replace(full, ",pods=0", "", 1),
		full + ",pods=3",
		full + ",widgets=3",
	} {
		st := openAs(t, r, "system:node:n1", []string{"system:nodes"}, selector("metadata.name=n1", rv))
		if codeOf(st) != 422 {
			t.Errorf("resourceVersion %q: got %v, want 422", rv, st)
		}
	}
}

func TestPositionRoundTrips(t *testing.T) {
	p := Position{Since: [numTypes]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, At: [numTypes]uint64{1, 5, 3, 4, 5, 6, 7, 8, 9, 12, 11},
		Types: v1alpha1.AllNodeViewTypes}
	got, err := ParsePosition(p.String())
	if err != nil || got != p {
		t.Fatalf("%s read back as %v, %v", p, got, err)
	}
	if !strings.HasPrefix(p.String(), "secrets=1,configmaps=2-5,") {
		t.Errorf("%s: want one number where the last change is the version", p)
	}
	if _, err := ParsePosition(strings.Replace(p.String(), "configmaps=2-5", "configmaps=6-5", 1)); err == nil {
		t.Error("a last change after the version was read")
	}
	behind := p
	behind.At[1] = 2 // a replica without the serving one's bookmark of configmaps
	if !behind.Reaches(p) {
		t.Error("a replica that has taken in every change must reach the position, whatever bookmarks it lacks")
	}
	behind.At[1] = 1
	if behind.Reaches(p) {
		t.Error("a replica without the last change reaches the position")
	}
}

// TestPositionOlderThanTheChangeLogIsAnsweredAfresh: the consumer gets
// the view afresh, on the same channel, to replace its copy with.
func TestPositionOlderThanTheChangeLogIsAnsweredAfresh(t *testing.T) {
	r := newReplica(t, 4)
	var k cluster
	c := r.open("n1", nil)
	step(r, c, k.put(secretsGVR, secret("s", "a")), k.put(podsGVR, pod("p", "n1", "secret/s")))
	for i := range 8 {
		step(r, c, k.put(secretsGVR, secret("s", fmt.Sprint(i))))
	}
	resumed := &consumer{t: t, node: "n1", held: map[string]uint64{}}
	var from Position
	from.At[podIndex] = 2 // before the pod: the secrets log of 4 changes no longer reaches it
	resumed.pos = from.String()
	resumed.view = newView("n1", v1alpha1.AllNodeViewTypes, &resumed.sink, r.graph, r.views)
	r.views.join(resumed.view, from, true)
	r.views.Step()
	if st := resumed.sink.closed; st != nil {
		t.Fatalf("a resume from a position the change logs no longer hold: closed with %v, want the view afresh", st)
	}
	expect(t, "the view afresh", resumed.read(), "ADDED Secret ns/s", "ADDED Pod ns/p", "BOOKMARK initial-events-end")
	check(t, r, resumed, "after the view afresh")
}

// TestTypesAreTheProtocols holds types to the protocol's list, which a
// position's indexes and a client's copy follow.
func TestTypesAreTheProtocols(t *testing.T) {
	for i, vt := range types {
		p := v1alpha1.NodeViewTypes[i]
		if vt.gvr.Group != p.Group || vt.gvr.Version != p.Version || vt.gvr.Resource != p.Resource {
			t.Errorf("type %d: the view's %v, the protocol's %+v", i, vt.gvr, p)
		}
	}
}
