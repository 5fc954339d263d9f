package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const demoNamespace = "demo"

// seed creates three nodes and a pod on two of them that reads a Secret
// or ConfigMaps: the smallest workload that gives nodes different rights.
// node-c starts empty: the watch tour schedules a pod there.
func seed(ctx context.Context, kube kubernetes.Interface) error {
	for _, n := range tourNodes {
		if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", n, err)
		}
	}
	ns := demoNamespace
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db-password"},
		StringData: map[string]string{"password": "demo-only"},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create secret: %w", err)
	}
	for _, cm := range []string{"web-config", "batch-config"} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: cm},
			Data:       map[string]string{"mode": cm},
		}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create configmap %s: %w", cm, err)
		}
	}
	pods := []*corev1.Pod{
		pod("web-0", "node-a", secretVolume("db-password"), configMapVolume("web-config")),
		pod("batch-0", "node-b", configMapVolume("batch-config")),
	}
	for _, p := range pods {
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
	}
	return nil
}

func pod(name, node string, volumes ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Volumes:    volumes,
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

func secretVolume(secret string) corev1.Volume {
	return corev1.Volume{Name: secret, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
}

func configMapVolume(cm string) corev1.Volume {
	return corev1.Volume{Name: cm, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
}
