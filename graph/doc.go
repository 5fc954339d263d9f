// Package graph will hold nodeproxy's authorization graph: which node may
// reach which object, through the pods bound to it.
//
//	node <- pod <- secret, configmap, serviceaccount, resourceclaim
//	         ^---- pvc <- pv <- secret
//	node <- volumeattachment, resourceslice
//
// The design it is held to (issue "graph + authorizer"): reachability kept
// current on every write (a count of paths per node and object), so that
// "may node N reach object O?" is answered without a walk; ordered change
// notifications per (node, object); and writers that never wait behind
// thousands of readers.
//
// Nothing is implemented yet; the package exists so that the layout is the
// designed one from the first commit.
package graph
