// Package satoken reads what a Kubernetes ServiceAccount token says of
// itself: the JWT's standard claims (iss, aud, exp, nbf, iat), its
// header's key ID, and the kubernetes.io claims a TokenRequest writes
// (the ServiceAccount, and the Secret, Pod or Node the token is bound
// to, each by name and UID).
//
// It reads them unverified, and verifies nothing: who may trust what a
// token says is the caller's to know. The hub reads the claims only of a
// token kube-apiserver's TokenReview accepted, so they are the ones
// kube-apiserver verified; the node endpoint reads them only to choose
// whom to ask. Neither lets a claim grant anything.
package satoken
