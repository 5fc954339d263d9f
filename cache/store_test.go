package cache

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// TestWatchFromAnySnapshotMissesNothing checks the store's promise under
// concurrency: for any two snapshots a reader takes, the changes between
// their resourceVersions turn the first into the second, none missing and
// none repeated, and the second's state at the first's version is the
// first, or the store says ErrExpired. Run with -race.
func TestWatchFromAnySnapshotMissesNothing(t *testing.T) {
	s := newStore(served[1], 64) // secrets
	if err := s.Replace(nil, "1"); err != nil {
		t.Fatal(err)
	}
	const writes = 5000
	done := make(chan struct{})
	var wg sync.WaitGroup
	var checked, expired sync.Map
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				a := s.Snapshot()
				select {
				case <-a.Next():
				case <-done: // a snapshot after the last write has no next
					return
				}
				b := s.Snapshot()
				events, err := b.Changes(a.RV)
				if errors.Is(err, ErrExpired) {
					expired.Store(r, true)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				state := contents(a)
				for _, e := range events {
					key := e.Object.Namespace + "/" + e.Object.Name
					switch e.Type {
					case watch.Added, watch.Modified:
						state[key] = e.Object.RV
					case watch.Deleted:
						delete(state, key)
					}
				}
				if want := contents(b); fmt.Sprint(state) != fmt.Sprint(want) {
					t.Errorf("snapshot %d + %d changes = %v, snapshot %d = %v", a.RV, len(events), state, b.RV, want)
					return
				}
				// The state at a's version, rebuilt from b's (most states
				// are not kept: checkpointEvery), is a's.
				if at, err := b.At(a.RV); err == nil && fmt.Sprint(contents(at)) != fmt.Sprint(contents(a)) {
					t.Errorf("snapshot %d at %d = %v, want %v", b.RV, a.RV, contents(at), contents(a))
					return
				} else if err != nil && !errors.Is(err, ErrExpired) {
					t.Error(err)
					return
				}
				checked.Store(r, true)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for rv := uint64(2); rv < writes; rv++ {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns" + strconv.Itoa(rng.IntN(3)), Name: "s" + strconv.Itoa(rng.IntN(20)),
			ResourceVersion: strconv.FormatUint(rv, 10),
		}}
		var err error
		if rng.IntN(4) == 0 {
			err = s.Delete(secret)
		} else {
			err = s.Update(secret)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	n := 0
	checked.Range(func(any, any) bool { n++; return true })
	if n == 0 {
		t.Fatal("no reader compared two snapshots")
	}
}

func contents(s *Snapshot) map[string]uint64 {
	m := map[string]uint64{}
	s.Ascend("", "", "", func(o *Object) bool {
		m[o.Namespace+"/"+o.Name] = o.RV
		return true
	})
	return m
}

func TestEncoderEncodesEachVersionOnce(t *testing.T) {
	s := newStore(served[1], 8)
	enc, err := NewEncoder(16)
	if err != nil {
		t.Fatal(err)
	}
	secret := func(rv, value string) *corev1.Secret {
		return &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", ResourceVersion: rv},
			Data:       map[string][]byte{"password": []byte(value)},
		}
	}
	if err := s.Replace([]interface{}{secret("5", "one")}, "5"); err != nil {
		t.Fatal(err)
	}
	o, _ := s.Snapshot().Get("ns", "db")
	first, err := enc.Encode(s, o)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := enc.Encode(s, o)
	if &first[0] != &again[0] {
		t.Error("the same version was encoded twice")
	}
	var back corev1.Secret
	if err := json.Unmarshal(first, &back); err != nil {
		t.Fatalf("%s: %v", first, err)
	}
	if back.Kind != "Secret" || back.APIVersion != "v1" || string(back.Data["password"]) != "one" || back.ResourceVersion != "5" {
		t.Errorf("decoded %+v", back)
	}

	if err := s.Update(secret("6", "two")); err != nil {
		t.Fatal(err)
	}
	o2, _ := s.Snapshot().Get("ns", "db")
	second, _ := enc.Encode(s, o2)
	if err := json.Unmarshal(second, &back); err != nil || string(back.Data["password"]) != "two" {
		t.Errorf("new version encoded as %s (%v)", second, err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := New(nil, Options{LogSize: 0, EncodedEntries: 10}); err == nil {
		t.Error("log size 0 accepted")
	}
	if _, err := New(nil, Options{LogSize: 10, EncodedEntries: 0}); err == nil {
		t.Error("encoded entries 0 accepted")
	}
}

// TestAnOlderSnapshotReadsTheLogWhileTheWriterMovesOn: a reader holding a
// snapshot asks for the changes after a version the log still holds
// while the writer has appended more since the snapshot, overwriting the
// ring's oldest slots. The changes it needs are all there: it must get
// them, not ErrExpired (which would make every watch of the type relist).
func TestAnOlderSnapshotReadsTheLogWhileTheWriterMovesOn(t *testing.T) {
	const size = 4
	s := newStore(served[1], size) // secrets
	if err := s.Replace(nil, "1"); err != nil {
		t.Fatal(err)
	}
	update := func(rv uint64) {
		t.Helper()
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s", ResourceVersion: strconv.FormatUint(rv, 10)}}
		if err := s.Update(secret); err != nil {
			t.Fatal(err)
		}
	}
	for rv := uint64(2); rv <= 11; rv++ { // 10 changes: the ring of 4 has wrapped
		update(rv)
	}
	snap := s.Snapshot() // at 11, the log holding 8..11
	for rv := uint64(12); rv <= 13; rv++ {
		update(rv) // overwrites the slots of 8 and 9
	}
	for _, tc := range []struct {
		from uint64
		want []uint64 // resourceVersions of the changes, or nil for ErrExpired
	}{
		{from: 10, want: []uint64{11}},
		{from: 9, want: []uint64{10, 11}},
		{from: 11, want: []uint64{}},
		{from: 8, want: nil}, // 9 is overwritten
		{from: 5, want: nil},
	} {
		events, err := snap.Changes(tc.from)
		if tc.want == nil {
			if !errors.Is(err, ErrExpired) {
				t.Errorf("changes after %d: %v, %v; want ErrExpired", tc.from, events, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("changes after %d of the snapshot at %d: %v", tc.from, snap.RV, err)
			continue
		}
		got := []uint64{}
		for _, e := range events {
			got = append(got, e.RV)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("changes after %d: %v, want %v", tc.from, got, tc.want)
		}
	}
	if at, err := snap.At(10); err != nil || at.RV != 10 {
		t.Errorf("state at 10 from the older snapshot: %v, %v", at, err)
	}
}

// TestAtRebuildsEveryStateExactly: the states the log did not keep
// (checkpointEvery) are rebuilt as they were, by name and by node,
// across updates, moves between nodes, deletions and carried-over
// relists; a version inside a relist's batch stays refused.
func TestAtRebuildsEveryStateExactly(t *testing.T) {
	s := newStore(served[0], 4096) // pods: both trees
	type state struct {
		byName, byNode string
	}
	dump := func(snap *Snapshot) state {
		var byNode []string
		for n := range 4 {
			node := "node-" + strconv.Itoa(n)
			snap.AscendNode(node, "", "", "", func(o *Object) bool {
				byNode = append(byNode, node+":"+o.Name+"@"+strconv.FormatUint(o.RV, 10))
				return true
			})
		}
		return state{byName: fmt.Sprint(contents(snap)), byNode: fmt.Sprint(byNode)}
	}
	pod := func(name string, node int, rv uint64) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: strconv.FormatUint(rv, 10)},
			Spec:       corev1.PodSpec{NodeName: "node-" + strconv.Itoa(node)},
		}
	}
	if err := s.Replace(nil, "1"); err != nil {
		t.Fatal(err)
	}
	states := map[uint64]state{}
	var gaps [][2]uint64
	rng := rand.New(rand.NewPCG(3, 4))
	rv := uint64(1)
	for step := range 1500 {
		rv += 2 // an odd version with no change of its own follows each
		name := "p" + strconv.Itoa(rng.IntN(40))
		var err error
		switch {
		case step%300 == 299:
			// A relist that carries on: the held pods, some changed,
			// one dropped, one new.
			from := s.Snapshot().RV
			var list []interface{}
			dropped := false
			s.Snapshot().Ascend("", "", "", func(o *Object) bool {
				obj, err := o.Typed()
				if err != nil {
					t.Fatal(err)
				}
				p := obj.(*corev1.Pod).DeepCopy()
				switch {
				case !dropped && rng.IntN(3) == 0:
					dropped = true
					return true
				case rng.IntN(3) == 0:
					rv++
					p.ResourceVersion = strconv.FormatUint(rv, 10)
					p.Spec.NodeName = "node-" + strconv.Itoa(rng.IntN(4))
				}
				list = append(list, p)
				return true
			})
			rv++
			list = append(list, pod("new-"+strconv.Itoa(step), rng.IntN(4), rv))
			rv += 2
			err = s.Replace(list, strconv.FormatUint(rv, 10))
			gaps = append(gaps, [2]uint64{from, rv})
		case rng.IntN(5) == 0:
			err = s.Delete(pod(name, 0, rv))
		default:
			err = s.Update(pod(name, rng.IntN(4), rv))
		}
		if err != nil {
			t.Fatal(err)
		}
		snap := s.Snapshot()
		states[snap.RV] = dump(snap)
	}
	last := s.Snapshot()
	inGap := func(v uint64) bool {
		for _, g := range gaps {
			if g[0] < v && v < g[1] {
				return true
			}
		}
		return false
	}
	rebuilt := 0
	for v := uint64(1); v < last.RV; v++ {
		at, err := last.At(v)
		if inGap(v) {
			if !errors.Is(err, ErrExpired) {
				t.Errorf("At(%d), inside a relist: %v, want ErrExpired", v, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("At(%d): %v", v, err)
		}
		want, ok := states[v]
		if !ok {
			want, ok = states[v-1] // no change at v: the state before it
		}
		if !ok {
			continue // a version a relist's events took
		}
		if got := dump(at); got != want {
			t.Fatalf("At(%d) = %+v, want %+v", v, got, want)
		}
		if at.RV != v && at.RV != v-1 {
			t.Errorf("At(%d) is at %d", v, at.RV)
		}
		rebuilt++
	}
	if rebuilt < 1000 {
		t.Fatalf("only %d states compared", rebuilt)
	}
}
