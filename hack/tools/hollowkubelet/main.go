// Command hollowkubelet is kubemark --morph=kubelet (the real kubelet
// code with a fake container runtime, see k8s.io/kubernetes
// pkg/kubemark) with the kubelet's HTTP pod source set: kubemark
// hard-codes an empty staticPodURL. nodeproxy's Pod API tests run it
// against the node endpoint's pod source.
//
// It takes kubemark's flags that test/controlplane passes
// (--morph=kubelet, --name, --kubeconfig, --kubelet-port,
// --kubelet-read-only-port, --use-host-image-service, --max-pods,
// --node-labels, --kube-api-qps) and:
//
//	--static-pod-url            the kubelet's staticPodURL
//	--static-pod-url-header     Name: value, repeatable (staticPodURLHeader)
//	--http-check-frequency      how often the kubelet fetches it (20s)
//
// The kubelet part of k8s.io/kubernetes cmd/kubemark/app/hollow_node.go,
// Copyright 2015 The Kubernetes Authors, Apache License 2.0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace/noop"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubemark"

	_ "k8s.io/component-base/metrics/prometheus/restclient" // client metrics, as kubemark
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hollowkubelet:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		morph, name, kubeconfig, staticPodURL string
		port, readOnlyPort, maxPods           int
		qps                                   float32
		useHostImages                         bool
		headers                               []string
		checkEvery                            time.Duration
	)
	labels := map[string]string{}
	fs := pflag.NewFlagSet("hollowkubelet", pflag.ExitOnError)
	fs.StringVar(&morph, "morph", "kubelet", "Only kubelet.")
	fs.StringVar(&name, "name", "fake-node", "The node's name.")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "The kubelet's kubeconfig.")
	fs.IntVar(&port, "kubelet-port", 10250, "The kubelet's port.")
	fs.IntVar(&readOnlyPort, "kubelet-read-only-port", 0, "The kubelet's read-only port; 0 for none.")
	fs.IntVar(&maxPods, "max-pods", 110, "Pods the node accepts.")
	fs.Float32Var(&qps, "kube-api-qps", 10, "QPS to the API.")
	fs.BoolVar(&useHostImages, "use-host-image-service", false, "Use containerd's image service rather than the fake one.")
	nodeLabels := cliflag.ConfigurationMap(labels)
	fs.Var(&nodeLabels, "node-labels", "Node labels.")
	fs.StringVar(&staticPodURL, "static-pod-url", "", "The kubelet's staticPodURL.")
	fs.StringArrayVar(&headers, "static-pod-url-header", nil, "A header the kubelet sends with the fetch, Name: value (staticPodURLHeader).")
	fs.DurationVar(&checkEvery, "http-check-frequency", 20*time.Second, "How often the kubelet fetches staticPodURL (httpCheckFrequency).")
	logs.AddFlags(fs)
	fs.AddGoFlagSet(flag.CommandLine)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if morph != "kubelet" {
		return errors.New("only --morph=kubelet")
	}
	ctx := context.Background()

	clientConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	clientConfig.ContentType = "application/vnd.kubernetes.protobuf"
	clientConfig.QPS, clientConfig.Burst = qps, int(2*qps)
	clientConfig.UserAgent = "hollow-kubelet"
	client, err := clientset.NewForConfig(clientConfig)
	if err != nil {
		return err
	}

	f, c := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName: name, KubeletPort: port, KubeletReadOnlyPort: readOnlyPort, MaxPods: maxPods, NodeLabels: labels,
	})
	c.StaticPodURL = staticPodURL
	c.HTTPCheckFrequency.Duration = checkEvery
	c.StaticPodURLHeader = map[string][]string{}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return fmt.Errorf("--static-pod-url-header %q: want Name: value", h)
		}
		k = strings.TrimSpace(k)
		c.StaticPodURLHeader[k] = append(c.StaticPodURLHeader[k], strings.TrimSpace(v))
	}

	heartbeat := *clientConfig
	heartbeat.Timeout = c.NodeStatusUpdateFrequency.Duration
	if lease := time.Duration(c.NodeLeaseDurationSeconds) * time.Second; heartbeat.Timeout > lease {
		heartbeat.Timeout = lease
	}
	heartbeat.QPS = -1
	heartbeatClient, err := clientset.NewForConfig(&heartbeat)
	if err != nil {
		return err
	}

	endpoint, err := fakeremote.GenerateEndpoint()
	if err != nil {
		return fmt.Errorf("fake runtime endpoint: %w", err)
	}
	runtime := fakeremote.NewFakeRemoteRuntime()
	if err := runtime.Start(endpoint); err != nil {
		return fmt.Errorf("fake runtime: %w", err)
	}
	defer runtime.Stop()
	runtimeService, err := remote.NewRemoteRuntimeService(ctx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return fmt.Errorf("runtime service: %w", err)
	}
	var images = runtime.ImageService
	if useHostImages {
		return errors.New("--use-host-image-service is not supported: the fake image service only")
	}
	klog.InfoS("Hollow kubelet with a pod source", "node", name, "staticPodURL", staticPodURL, "httpCheckFrequency", checkEvery)
	kubemark.NewHollowKubelet(f, c, client, heartbeatClient, &cadvisortest.Fake{NodeName: name},
		images, runtimeService, cm.NewStubContainerManager()).Run(ctx)
	return nil
}
