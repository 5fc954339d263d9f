// Package authorizer will decide requests from node identities
// (system:node:<name> in group system:nodes) against package graph, with
// the same answers as kube-apiserver's in-tree Node authorizer, and serve
// them as a SubjectAccessReview webhook. Everyone else gets NoOpinion.
//
// Nothing is implemented yet; see the issue "graph + authorizer".
package authorizer
