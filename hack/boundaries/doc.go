// Package boundaries states which of nodeproxy's packages may depend on
// which, and checks it: `make test` runs its tests, which list every
// package's dependencies with `go list -deps` and fail on the first rule
// broken. kube-apiserver keeps rules of the same kind in its
// import-restrictions files; these are Go values so that a rule and the
// reason for it sit side by side.
//
// The shape the rules keep (docs/architecture.md draws it):
//
//	          core                          rooms
//	cache  graph  authorizer  watchmux
//	  ^      ^        ^           ^
//	  |      +--------+-----------+---- hub (nodeproxy serve):
//	  |               |           |       bulk, bulk/get, bulk/watch,
//	  +---------------+-----------+       passthrough, hub
//	                              |
//	                              +---- endpoint (nodeproxy node):
//	                                      endpoint/..., podapi, nodeinstall
//
//	harness (test/...) and tooling (hack/...): linked by tests, the
//	benchmark and the build only, never by nodeproxy or nodeproxy-node.
//
// Rules are about what a package links (its imports, transitively, test
// files excluded): a core package's tests may start the harness's control
// plane, but the core itself must not know the harness, nor the products
// built on it.
package boundaries
