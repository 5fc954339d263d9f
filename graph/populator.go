package graph

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Informer event handlers that keep a graph current. Each handler runs on
// its informer's delivery goroutine; the graph serializes them.

// PodHandler keeps g current with pods.
func (g *Graph) PodHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if pod, ok := obj.(*corev1.Pod); ok {
				g.AddPod(pod)
			}
		},
		UpdateFunc: func(old, obj interface{}) {
			oldPod, _ := old.(*corev1.Pod)
			if pod, ok := obj.(*corev1.Pod); ok {
				g.UpdatePod(oldPod, pod)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if pod, ok := unwrap[*corev1.Pod](obj); ok && pod.Spec.NodeName != "" {
				g.DeletePod(pod.Namespace, pod.Name)
			}
		},
	}
}

// PVHandler keeps g current with persistent volumes.
func (g *Graph) PVHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if pv, ok := obj.(*corev1.PersistentVolume); ok {
				g.AddPV(pv)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if pv, ok := obj.(*corev1.PersistentVolume); ok {
				g.AddPV(pv)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if pv, ok := unwrap[*corev1.PersistentVolume](obj); ok {
				g.DeletePV(pv.Name)
			}
		},
	}
}

// VolumeAttachmentHandler keeps g current with volume attachments.
func (g *Graph) VolumeAttachmentHandler() toolscache.ResourceEventHandler {
	set := func(obj interface{}) {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok {
			g.AddVolumeAttachment(va.Name, va.Spec.NodeName)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj interface{}) { set(obj) },
		DeleteFunc: func(obj interface{}) {
			if va, ok := unwrap[*storagev1.VolumeAttachment](obj); ok {
				g.DeleteVolumeAttachment(va.Name)
			}
		},
	}
}

// ResourceSliceHandler keeps g current with resource slices. A slice's
// node is immutable, so updates change nothing.
func (g *Graph) ResourceSliceHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if s, ok := obj.(*resourcev1.ResourceSlice); ok {
				node := ""
				if s.Spec.NodeName != nil {
					node = *s.Spec.NodeName
				}
				g.AddResourceSlice(s.Name, node)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if s, ok := unwrap[*resourcev1.ResourceSlice](obj); ok {
				g.DeleteResourceSlice(s.Name)
			}
		},
	}
}

// unwrap returns the object of a delete event, which may come as the
// tombstone of an object deleted while the watch was down.
func unwrap[T any](obj interface{}) (T, bool) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(T)
	if !ok {
		klog.ErrorS(nil, "Unexpected object in delete event", "type", fmt.Sprintf("%T", obj))
	}
	return t, ok
}
