package authorizer

import (
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
)

const nodeUserPrefix = "system:node:"

// nodeIdentity returns the node a user is, and whether the user is a node
// at all: a name starting with system:node: and membership of
// system:nodes. A node whose name is empty (user "system:node:") is a node
// whose requests cannot be decided.
func nodeIdentity(u user.Info) (name string, isNode bool) {
	if u == nil {
		return "", false
	}
	name, found := strings.CutPrefix(u.GetName(), nodeUserPrefix)
	if !found {
		return "", false
	}
	for _, g := range u.GetGroups() {
		if g == user.NodesGroup {
			return name, true
		}
	}
	return "", false
}

// NodeName returns the node a user is, and whether the user is a node
// identity at all (see nodeIdentity). Other packages that decide node
// requests against the graph use it so that every decision agrees on who
// is a node.
func NodeName(u user.Info) (name string, isNode bool) { return nodeIdentity(u) }
