package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

var cp *ControlPlane

// TestMain starts the control plane under test itself: the shared helper
// (testserver.RunTests) imports this package.
func TestMain(m *testing.M) {
	started, err := Start(context.Background(), Options{Log: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		os.Exit(1)
	}
	cp = started
	code := m.Run()
	started.Stop()
	os.Exit(code)
}

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

func TestMintedIdentitiesAuthenticate(t *testing.T) {
	node, err := cp.NodeConfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	user, err := cp.UserConfig("alice", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		cfg        *rest.Config
		wantUser   string
		wantGroups []string
	}{
		{"admin", cp.AdminConfig(), "nodeproxy-test-admin", []string{"system:masters", "system:authenticated"}},
		{"node", node, "system:node:node-a", []string{"system:nodes", "system:authenticated"}},
		{"user", user, "alice", []string{"team-a", "system:authenticated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			review, err := clientFor(t, tc.cfg).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("self subject review: %v", err)
			}
			got := review.Status.UserInfo
			if got.Username != tc.wantUser {
				t.Errorf("user = %q, want %q", got.Username, tc.wantUser)
			}
			if !slices.Equal(got.Groups, tc.wantGroups) {
				t.Errorf("groups = %v, want %v", got.Groups, tc.wantGroups)
			}
		})
	}
}

func TestPodsCanBeCreatedWithoutControllerManager(t *testing.T) {
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, "harness-pods"); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "harness-pods"},
		Spec: corev1.PodSpec{
			NodeName:   "node-a",
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	got, err := clientFor(t, cp.AdminConfig()).CoreV1().Pods("harness-pods").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if got.Spec.ServiceAccountName != "default" {
		t.Errorf("service account = %q, want default", got.Spec.ServiceAccountName)
	}
}

// TestAggregationReachesLocalhost registers an APIService backed by an
// ExternalName Service "localhost" and checks that kube-apiserver proxies to
// a server on this machine, presenting the front-proxy client certificate
// and the caller's name in X-Remote-User.
func TestAggregationReachesLocalhost(t *testing.T) {
	ctx := context.Background()
	const group, version = "harness.nodeproxy.io", "v1"

	var mu sync.Mutex
	var seenUser, seenCN string
	srv, port := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/apis/"+group+"/"+version && r.Header.Get("X-Remote-User") == "nodeproxy-test-admin" {
			mu.Lock()
			seenUser = r.Header.Get("X-Remote-User")
			if len(r.TLS.PeerCertificates) > 0 {
				seenCN = r.TLS.PeerCertificates[0].Subject.CommonName
			}
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: group + "/" + version,
			APIResources: []metav1.APIResource{},
		})
	}))
	defer srv.Close()

	admin := cp.AdminConfig()
	if _, err := clientFor(t, admin).CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "harness-local"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service: %v", err)
	}
	agg, err := aggregatorclient.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	p := int32(port)
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: version + "." + group},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: group, Version: version,
			Service:               &apiregistrationv1.ServiceReference{Namespace: "default", Name: "harness-local", Port: &p},
			InsecureSkipTLSVerify: true,
			GroupPriorityMinimum:  1000, VersionPriority: 15,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create apiservice: %v", err)
	}

	rc := clientFor(t, admin).Discovery().RESTClient()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return rc.Get().AbsPath("/apis", group, version).Do(ctx).Error() == nil, nil
	})
	if err != nil {
		t.Fatalf("aggregated group never answered through kube-apiserver: %v\n%s", err, cp.Logs())
	}
	mu.Lock()
	defer mu.Unlock()
	if seenUser != "nodeproxy-test-admin" || seenCN != FrontProxyClientName {
		t.Errorf("proxied request: X-Remote-User %q, client certificate %q; want nodeproxy-test-admin, %s", seenUser, seenCN, FrontProxyClientName)
	}
}

func startTLSServer(t *testing.T, h http.Handler) (*http.Server, int) {
	t.Helper()
	kp, err := cp.ServingCA.ServingCert("", "")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cp.FrontProxyCA.Cert)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
	}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	return srv, l.Addr().(*net.TCPAddr).Port
}
