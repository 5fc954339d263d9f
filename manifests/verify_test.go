package manifests

import (
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestNoShippedAPIServiceSkipsVerification: what kube-apiserver proxies
// to bulk.k8s.io reaches kubelets (--hub-through-apiserver), so no
// kustomization may register an APIService that kube-apiserver does not
// verify: none skips verification, and each has a caBundle, or asks
// cert-manager's CA injector for one from a Certificate the same
// kustomization creates for the Service the APIService names.
func TestNoShippedAPIServiceSkipsVerification(t *testing.T) {
	for dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			_, out := build(t, dir)
			docs := strings.Split(string(out), "\n---\n")
			for _, doc := range docs {
				var a apiregistrationv1.APIService
				if err := sigsyaml.Unmarshal([]byte(doc), &a); err != nil {
					t.Fatal(err)
				}
				if a.Kind != "APIService" {
					continue
				}
				if a.Spec.InsecureSkipTLSVerify {
					t.Errorf("APIService %s skips TLS verification: kube-apiserver would feed kubelets from whatever answers", a.Name)
				}
				if len(a.Spec.CABundle) > 0 {
					if b, _ := pem.Decode(a.Spec.CABundle); b == nil || b.Type != "CERTIFICATE" {
						t.Errorf("APIService %s: caBundle holds no PEM certificate", a.Name)
					}
					continue
				}
				from, ok := a.Annotations["cert-manager.io/inject-ca-from"]
				if !ok {
					t.Errorf("APIService %s has neither a caBundle nor cert-manager.io/inject-ca-from: kube-apiserver cannot verify the hub", a.Name)
					continue
				}
				if a.Spec.Service == nil {
					t.Errorf("APIService %s names no Service", a.Name)
					continue
				}
				svc := a.Spec.Service.Name + "." + a.Spec.Service.Namespace + ".svc"
				if names, found := certificateNames(t, docs, from); !found {
					t.Errorf("APIService %s injects its caBundle from Certificate %s, which %s does not create", a.Name, from, dir)
				} else if !slices.Contains(names, svc) {
					t.Errorf("Certificate %s names %v, not %s, which kube-apiserver verifies", from, names, svc)
				}
			}
		})
	}
}

// certificateNames returns the DNS names of cert-manager Certificate
// namespace/name among docs, and whether it is there.
func certificateNames(t *testing.T, docs []string, namespacedName string) ([]string, bool) {
	t.Helper()
	for _, doc := range docs {
		var c struct {
			APIVersion, Kind string
			Metadata         struct{ Name, Namespace string }
			Spec             struct{ DNSNames []string }
		}
		if err := sigsyaml.Unmarshal([]byte(doc), &c); err != nil {
			t.Fatal(err)
		}
		if c.Kind == "Certificate" && strings.HasPrefix(c.APIVersion, "cert-manager.io/") && c.Metadata.Namespace+"/"+c.Metadata.Name == namespacedName {
			return c.Spec.DNSNames, true
		}
	}
	return nil, false
}

// TestDelegationRoleBindingIsInKubeSystem: the hub reads the client and
// front-proxy CAs from kube-system/extension-apiserver-authentication,
// which only a RoleBinding in kube-system to the Role of that name lets
// it do; a kustomization that moves the binding into its own namespace
// (a `namespace:` field does) leaves the hub unable to authenticate
// anyone by certificate.
func TestDelegationRoleBindingIsInKubeSystem(t *testing.T) {
	for dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			_, out := build(t, dir)
			for _, doc := range strings.Split(string(out), "\n---\n") {
				var rb rbacv1.RoleBinding
				if err := sigsyaml.Unmarshal([]byte(doc), &rb); err != nil {
					t.Fatal(err)
				}
				if rb.Kind == "RoleBinding" && rb.RoleRef.Name == "extension-apiserver-authentication-reader" && rb.Namespace != "kube-system" {
					t.Errorf("RoleBinding %s is in %q: the Role %s is kube-system's", rb.Name, rb.Namespace, rb.RoleRef.Name)
				}
			}
		})
	}
}
