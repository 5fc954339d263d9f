package authorizer

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

// BenchmarkAuthorization asks the questions of the in-tree Node
// authorizer's BenchmarkAuthorization, on the same cluster shape (100k
// pods), single-threaded and with 5000 goroutines per CPU asking at once.
//
//	go test ./authorizer -run '^$' -bench Authorization -benchmem
func BenchmarkAuthorization(b *testing.B) {
	c, err := workload.Generate(workload.ReferenceShape())
	if err != nil {
		b.Fatal(err)
	}
	g := graph.New()
	c.WriteTo(g)
	a := New(g)
	node0 := &user.DefaultInfo{Name: "system:node:node0", Groups: []string{user.NodesGroup}}
	get := func(group, resource, ns, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: node0, ResourceRequest: true, Verb: "get", APIGroup: group, Resource: resource, Namespace: ns, Name: name}
	}
	cases := []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{"allowed configmap", get("", "configmaps", "ns0", "configmap0-pod0-node0"), allowed},
		{"allowed secret via pod", get("", "secrets", "ns0", "secret0-pod0-node0"), allowed},
		{"allowed shared secret via pod", get("", "secrets", "ns0", "secret0-shared"), allowed},
		{"allowed secret via pv", get("", "secrets", "ns0", "secret-pv0-pod0-node0-ns0"), allowed},
		{"disallowed configmap", get("", "configmaps", "ns0", "configmap0-pod0-node1"), refused},
		{"disallowed secret via pod", get("", "secrets", "ns0", "secret0-pod0-node1"), refused},
		{"disallowed shared secret via pvc", get("", "secrets", "ns0", "secret-pv0-pod0-node1-ns0"), refused},
		{"disallowed pvc", get("", "persistentvolumeclaims", "ns0", "pvc0-pod0-node1"), refused},
		{"disallowed pv", get("", "persistentvolumes", "", "pv0-pod0-node1-ns0"), refused},
		{"disallowed attachment", get("storage.k8s.io", "volumeattachments", "", "attachment0-node1"), refused},
		{"allowed attachment", get("storage.k8s.io", "volumeattachments", "", "attachment0-node0"), allowed},
	}
	ctx := context.Background()
	// Attributes go in as a pointer, as a server holds them: boxing the
	// 200-byte record into the interface anew each call would allocate.
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			attrs := &tc.attrs
			for b.Loop() {
				if d, _, _ := a.Authorize(ctx, attrs); d != tc.want {
					b.Fatalf("decision %v, want %v", d, tc.want)
				}
			}
		})
	}
	for _, tc := range cases {
		b.Run("parallel "+tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(5000)
			attrs := &tc.attrs
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, _, _ := a.Authorize(ctx, attrs); d != tc.want {
						b.Errorf("decision %v, want %v", d, tc.want)
						return
					}
				}
			})
		})
	}
}
