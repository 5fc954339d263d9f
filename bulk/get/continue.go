package get

import (
	"strings"

	"k8s.io/apiserver/pkg/storage"

	"github.com/nodeproxy/nodeproxy/cache"
)

// Continue tokens are kube-apiserver's (k8s.io/apiserver/pkg/storage):
// the key to start at, "/<namespace>/<name>\x00" (just after the last
// item returned), and the resourceVersion of the state being paged.
// bulk.Query.Continue decodes them; continueToken encodes the token of
// the page after last.
func continueToken(s *cache.Store, last *cache.Object, rv uint64) (string, error) {
	key := "/" + last.Name + "\x00"
	if s.Namespaced {
		key = "/" + last.Namespace + "/" + last.Name + "\x00"
	}
	return storage.EncodeContinue(key, "/", int64(rv))
}

// startFromContinue is where a continue token's key, of s's type, says
// the next page starts.
func startFromContinue(s *cache.Store, key string) (namespace, name string) {
	key = strings.TrimPrefix(key, "/")
	if !s.Namespaced {
		return "", key
	}
	namespace, name, _ = strings.Cut(key, "/")
	return namespace, name
}
