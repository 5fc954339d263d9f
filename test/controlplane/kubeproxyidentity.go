package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The identity kubeadm gives kube-proxy (cmd/kubeadm/app/phases/addons/
// proxy in v1.36.3): the DaemonSet's pods run as ServiceAccount
// kube-system/kube-proxy, which ClusterRoleBinding kubeadm:node-proxier
// binds to the bootstrap ClusterRole system:node-proxier (list and watch
// Services, EndpointSlices, ServiceCIDRs and Nodes; create and patch
// Events). kube-apiserver creates that ClusterRole itself.
const (
	KubeProxyNamespace      = metav1.NamespaceSystem
	KubeProxyServiceAccount = "kube-proxy"
	KubeProxyBinding        = "kubeadm:node-proxier"
	KubeProxyClusterRole    = "system:node-proxier"
)

// kubeProxyTokenExpiry is how long each hollow proxy's token lives. An
// hour outlasts any test or benchmark run here, and is bounded, as the
// projected tokens a real kube-proxy pod gets are (kube-apiserver's
// default for those is one hour too, the kubelet refreshing them at 80%).
// Nothing refreshes these: a proxy that runs longer is refused.
const kubeProxyTokenExpiry = time.Hour

// EnsureKubeProxyRBAC creates, if missing, kube-proxy's ServiceAccount and
// the ClusterRoleBinding that grants it system:node-proxier, as kubeadm
// does.
func (cp *ControlPlane) EnsureKubeProxyRBAC(ctx context.Context) error {
	admin, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if err := ensureServiceAccount(ctx, admin, KubeProxyNamespace, KubeProxyServiceAccount); err != nil {
		return err
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: KubeProxyBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: KubeProxyClusterRole},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Namespace: KubeProxyNamespace, Name: KubeProxyServiceAccount,
		}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create clusterrolebinding %s: %w", KubeProxyBinding, err)
	}
	return nil
}

// EnsureServiceAccount creates ServiceAccount ns/name if missing, with no
// binding: what a test of a refused identity needs.
func (cp *ControlPlane) EnsureServiceAccount(ctx context.Context, ns, name string) error {
	admin, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	return ensureServiceAccount(ctx, admin, ns, name)
}

func ensureServiceAccount(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create serviceaccount %s/%s: %w", ns, name, err)
	}
	return nil
}

// ServiceAccountToken asks kube-apiserver for a new token of ServiceAccount
// ns/name (TokenRequest), valid for expiry. Every call returns a token of
// its own (its own jti and times), as every pod of a DaemonSet gets; the
// token is bound to no object, so it outlives nothing but its expiry.
func (cp *ControlPlane) ServiceAccountToken(ctx context.Context, ns, name string, expiry time.Duration) (string, error) {
	admin, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return "", fmt.Errorf("admin client: %w", err)
	}
	seconds := int64(expiry / time.Second)
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for serviceaccount %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// SecretBoundToken creates Secret ns/secret and asks kube-apiserver for a
// token of ServiceAccount ns/name bound to it (TokenRequest with the
// Secret as its bound object), as a legacy token Secret or a pod's
// projected token is bound to what holds it: deleting the Secret revokes
// the token (kube-apiserver refuses it once its token cache, 10 s, lets
// go). It returns the token and the Secret.
func (cp *ControlPlane) SecretBoundToken(ctx context.Context, ns, name, secret string) (string, *corev1.Secret, error) {
	admin, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return "", nil, fmt.Errorf("admin client: %w", err)
	}
	holder, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("create secret %s/%s: %w", ns, secret, err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: holder.Name, UID: holder.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("token for serviceaccount %s/%s bound to secret %s: %w", ns, name, secret, err)
	}
	return tr.Status.Token, holder, nil
}

// projectedTokenExpirySeconds is what the ServiceAccount admission plugin
// writes into every pod's projected token volume, and so what the kubelet
// asks a TokenRequest for (serviceaccount.WarnOnlyBoundTokenExpirationSeconds
// in k8s.io/kubernetes): kube-apiserver extends such a pod-bound token's
// exp to a year (--service-account-extend-token-expiration, on by
// default) and marks when the hour is past with a warnafter claim.
const projectedTokenExpirySeconds = 60*60 + 7

// PodBoundToken asks kube-apiserver for a token of ServiceAccount
// ns/name bound to pod, as the kubelet asks for the projected token of a
// pod it runs (a kube-proxy's, of a DaemonSet): the pod's name and UID,
// and the node of its spec.nodeName, are in the token's claims, and the
// user kube-apiserver authenticates carries them in its extra. Deleting
// the pod revokes the token (once its deletionTimestamp is a minute
// past: kube-apiserver's leeway).
func (cp *ControlPlane) PodBoundToken(ctx context.Context, ns, name string, pod *corev1.Pod) (string, error) {
	admin, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return "", fmt.Errorf("admin client: %w", err)
	}
	seconds := int64(projectedTokenExpirySeconds)
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &seconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for serviceaccount %s/%s bound to pod %s: %w", ns, name, pod.Name, err)
	}
	return tr.Status.Token, nil
}

// ProxyServer is where a kube-proxy's kubeconfig points: kube-apiserver
// (cp.APIServerTarget) or a node endpoint in front of it, and the CA its
// serving certificate is verified with.
type ProxyServer struct {
	// URL is the server, https://host:port.
	URL string
	// CAPEM is the PEM of the CA that signed the server's certificate.
	CAPEM []byte
}

// APIServerTarget is kube-apiserver itself, verified with ServingCA.
func (cp *ControlPlane) APIServerTarget() ProxyServer {
	return ProxyServer{URL: cp.URL, CAPEM: certPEM(cp.ServingCA.Cert.Raw)}
}

// ServiceAccountKubeconfig mints a token of ServiceAccount ns/name (see
// ServiceAccountToken, kubeProxyTokenExpiry) and writes a kubeconfig with
// it and server to path, the form kubemark takes.
func (cp *ControlPlane) ServiceAccountKubeconfig(ctx context.Context, ns, name string, server ProxyServer, path string) error {
	token, err := cp.ServiceAccountToken(ctx, ns, name, kubeProxyTokenExpiry)
	if err != nil {
		return err
	}
	return WriteKubeconfig(&rest.Config{
		Host:            server.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: server.CAPEM},
		BearerToken:     token,
	}, path)
}

// HollowProxiesOptions choose how StartHollowProxies runs its proxies.
type HollowProxiesOptions struct {
	// Count is how many to start.
	Count int
	// NamePrefix names the nodes <prefix>-0, <prefix>-1, ...
	NamePrefix string
	// Server is where their kubeconfigs point; the zero value is
	// kube-apiserver (APIServerTarget).
	Server ProxyServer
	// ServiceAccount is who they authenticate as, in KubeProxyNamespace;
	// "" is KubeProxyServiceAccount, which StartHollowProxies binds as
	// kubeadm does. Any other is used as it is (created, never bound).
	ServiceAccount string
	// Dir receives their kubeconfigs and logs.
	Dir string
	// ExtraArgs are appended to each kubemark's command line.
	ExtraArgs []string
}

// StartHollowProxies starts opts.Count hollow proxies (bin is kubemark),
// each with a token of its own in a kubeconfig of its own
// (<Dir>/<node>.kubeconfig). It returns once they all run, without waiting
// for them to sync (see WaitSynced). The caller stops them: on error,
// nothing is left running.
func (cp *ControlPlane) StartHollowProxies(ctx context.Context, bin string, opts HollowProxiesOptions) (_ []*HollowProxy, err error) {
	if opts.Count <= 0 || opts.NamePrefix == "" || opts.Dir == "" {
		return nil, fmt.Errorf("hollow proxies: Count (%d) must be positive, NamePrefix and Dir set", opts.Count)
	}
	if opts.Server.URL == "" {
		opts.Server = cp.APIServerTarget()
	}
	sa := opts.ServiceAccount
	if sa == "" || sa == KubeProxyServiceAccount {
		sa = KubeProxyServiceAccount
		err = cp.EnsureKubeProxyRBAC(ctx)
	} else {
		err = cp.EnsureServiceAccount(ctx, KubeProxyNamespace, sa)
	}
	if err != nil {
		return nil, err
	}
	var proxies []*HollowProxy
	defer func() {
		if err != nil {
			for _, p := range proxies {
				p.Stop()
			}
		}
	}()
	for i := range opts.Count {
		name := fmt.Sprintf("%s-%d", opts.NamePrefix, i)
		kubeconfig := filepath.Join(opts.Dir, name+".kubeconfig")
		if err := cp.ServiceAccountKubeconfig(ctx, KubeProxyNamespace, sa, opts.Server, kubeconfig); err != nil {
			return nil, fmt.Errorf("hollow proxy %s: %w", name, err)
		}
		p, err := StartHollowProxy(bin, HollowProxyOptions{Name: name, Kubeconfig: kubeconfig, Dir: opts.Dir, ExtraArgs: opts.ExtraArgs})
		if err != nil {
			return nil, err
		}
		proxies = append(proxies, p)
	}
	return proxies, nil
}
