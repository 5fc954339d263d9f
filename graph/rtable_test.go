package graph

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

type item struct{ k string }

func newItems() *rtable[string, item] { return newRTable(func(i *item) string { return i.k }) }

func TestRTableInsertGetRemoveAcrossGrowth(t *testing.T) {
	tb := newItems()
	items := map[string]*item{}
	for i := range 10000 {
		it := &item{k: fmt.Sprint(i)}
		items[it.k] = it
		tb.insert(it)
		if i%3 == 0 {
			tb.remove(items[fmt.Sprint(i/2)])
			delete(items, fmt.Sprint(i/2))
		}
	}
	if tb.len() != len(items) {
		t.Fatalf("len = %d, want %d", tb.len(), len(items))
	}
	for i := range 10000 {
		k := fmt.Sprint(i)
		if got, want := tb.get(k), items[k]; got != want {
			t.Fatalf("get(%q) = %v, want %v", k, got, want)
		}
	}
	if tb.get("absent") != nil {
		t.Fatal("found an absent key")
	}
}

// TestRTableReadersNeverSeeAStrangerOrMissAStayer runs lock-free readers
// against a writer that inserts, removes and grows the table, under -race.
func TestRTableReadersNeverSeeAStrangerOrMissAStayer(t *testing.T) {
	tb := newItems()
	stayer := &item{k: "stayer"}
	tb.insert(stayer)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var failures atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if tb.get("stayer") != stayer {
					failures.Add(1)
				}
				if p := tb.get("churn-7"); p != nil && p.k != "churn-7" {
					failures.Add(1)
				}
			}
		}()
	}
	for round := range 200 {
		var batch []*item
		for i := range 100 {
			it := &item{k: fmt.Sprintf("churn-%d", i+round%3)}
			if tb.get(it.k) == nil {
				tb.insert(it)
				batch = append(batch, it)
			}
		}
		for _, it := range batch {
			tb.remove(it)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d reads saw a wrong entry", n)
	}
}
