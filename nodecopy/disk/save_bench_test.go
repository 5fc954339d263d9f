package disk

import (
	"os"
	"testing"
)

// BenchmarkSave saves a view of 100 objects of about 2 KiB (secrets,
// configmaps and pods), plaintext and encrypted, fsyncs included, into a
// directory of the test's temporary file system. Figures:
// docs/operations.md, "Secrets at rest on the node".
func BenchmarkSave(b *testing.B) {
	for _, bc := range []struct {
		name string
		key  []byte
	}{
		{"plaintext", nil},
		{"aes-256-gcm", testKey("a")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := Open(b.TempDir()+"/view", bc.key)
			if err != nil {
				b.Fatal(err)
			}
			snap := &Snapshot{Node: testNode, Cluster: testCluster, Position: "secrets=700-812,configmaps=790,pods=813", Objects: objectsOf(b, 100, 2048)}
			if err := s.Save(snap); err != nil {
				b.Fatal(err)
			}
			fi, err := os.Stat(s.Path())
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(fi.Size())
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Save(snap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
