package graph

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// AddPV records a PersistentVolume: bound to a claim (spec.claimRef), it
// is reachable wherever the claim is, and so are the secrets it shows the
// kubelet. An unbound PV grants nothing. It replaces an earlier PV of the
// same name.
func (g *Graph) AddPV(pv *corev1.PersistentVolume) {
	defer observeWrite("AddPV")()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removePVLocked(pv.Name)
	if pv.Spec.ClaimRef != nil {
		g.addPVLocked(pv)
	}
	g.flushLocked()
}

// DeletePV removes the PersistentVolume of that name.
func (g *Graph) DeletePV(name string) {
	defer observeWrite("DeletePV")()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removePVLocked(name)
	g.flushLocked()
}

func (g *Graph) addPVLocked(pv *corev1.PersistentVolume) {
	rec := &pvRecord{
		self:  g.acquireLocked(ObjectRef{Kind: PersistentVolume, Name: pv.Name}),
		claim: g.acquireLocked(ObjectRef{Kind: PersistentVolumeClaim, Namespace: pv.Spec.ClaimRef.Namespace, Name: pv.Spec.ClaimRef.Name}),
	}
	pvSecrets(pv, func(ref ObjectRef) {
		for _, e := range rec.secrets {
			if e.ref() == ref {
				return
			}
		}
		rec.secrets = append(rec.secrets, g.acquireLocked(ref))
	})
	// Link first, then hand over the claim's paths: they flow on to the
	// secrets through the link.
	g.pvs[rec.self] = rec
	g.claimPVs[rec.claim] = append(g.claimPVs[rec.claim], rec)
	g.eachNodeLocked(rec.claim, func(id uint32, paths int32) {
		g.addPathsLocked(rec.self, id, paths)
	})
}

func (g *Graph) removePVLocked(name string) {
	self := g.objects.get(ObjectRef{Kind: PersistentVolume, Name: name})
	rec, ok := g.pvs[self]
	if !ok {
		return
	}
	// Take the claim's paths back while the PV still leads to its secrets,
	// then unlink.
	g.eachNodeLocked(rec.claim, func(id uint32, paths int32) {
		g.addPathsLocked(rec.self, id, -paths)
	})
	delete(g.pvs, self)
	if pvs := slices.DeleteFunc(g.claimPVs[rec.claim], func(p *pvRecord) bool { return p == rec }); len(pvs) > 0 {
		g.claimPVs[rec.claim] = pvs
	} else {
		delete(g.claimPVs, rec.claim)
	}
	for _, e := range rec.secrets {
		g.releaseLocked(e)
	}
	g.releaseLocked(rec.claim)
	g.releaseLocked(rec.self)
}

// AddVolumeAttachment records that attachment name is for node; an
// attachment without a node grants nothing.
func (g *Graph) AddVolumeAttachment(name, node string) {
	g.setOwner("AddVolumeAttachment", ObjectRef{Kind: VolumeAttachment, Name: name}, node)
}

// DeleteVolumeAttachment removes the attachment of that name.
func (g *Graph) DeleteVolumeAttachment(name string) {
	g.setOwner("DeleteVolumeAttachment", ObjectRef{Kind: VolumeAttachment, Name: name}, "")
}

// AddResourceSlice records that slice name belongs to node; a slice
// without a node (one for the whole cluster) grants nothing.
func (g *Graph) AddResourceSlice(name, node string) {
	g.setOwner("AddResourceSlice", ObjectRef{Kind: ResourceSlice, Name: name}, node)
}

// DeleteResourceSlice removes the slice of that name.
func (g *Graph) DeleteResourceSlice(name string) {
	g.setOwner("DeleteResourceSlice", ObjectRef{Kind: ResourceSlice, Name: name}, "")
}

// setOwner makes ref reachable from node alone, or from no node when
// node is empty: the one edge of attachments and slices.
func (g *Graph) setOwner(op string, ref ObjectRef, node string) {
	defer observeWrite(op)()
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.owners[ref]; ok {
		if r := e.reach.Load(); r != 0 && node != "" && g.names[r-1] == node {
			return // unchanged, as most informer updates are
		}
		g.eachNodeLocked(e, func(id uint32, paths int32) { g.addPathsLocked(e, id, -paths) })
		g.releaseLocked(e)
		delete(g.owners, ref)
	}
	if node != "" {
		e := g.acquireLocked(ref)
		g.addPathsLocked(e, g.nodeIDLocked(node), 1)
		g.owners[ref] = e
	}
	g.flushLocked()
}

// ClaimVolumes returns the PersistentVolumes bound to claim (their
// spec.claimRef) and the secrets those volumes show the kubelet: the
// edges a claim's paths flow on through. It is for a caller that has a
// node's pods from elsewhere and needs the rest of the node's reach from
// this graph (the authorizer deciding for a node whose pods this replica
// does not hold, from kube-apiserver's list of them). It takes the
// writer's lock, unlike Reachable: that path is rare, and the claim
// index is the writer's.
func (g *Graph) ClaimVolumes(claim ObjectRef) (pvs, secrets []ObjectRef) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.objects.get(claim)
	if e == nil {
		return nil, nil
	}
	for _, rec := range g.claimPVs[e] {
		pvs = append(pvs, rec.self.ref())
		for _, s := range rec.secrets {
			secrets = append(secrets, s.ref())
		}
	}
	return pvs, secrets
}
