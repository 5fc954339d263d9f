package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"sigs.k8s.io/yaml"
)

// RegisterAPIService registers the APIService in the YAML file at path
// (one object, as shipped in manifests/), pointed at a server on this
// machine at port through an ExternalName Service "localhost" in the
// APIService's service namespace, named <service>-local: kube-apiserver
// then verifies the server as <service>-local.<namespace>.svc
// (LocalServiceName), which its serving certificate must name. An
// APIService that asks cert-manager's CA injector for its caBundle (the
// shipped one) gets the harness's serving CA, as the injector would put
// the hub's CA there. It returns once the APIService is
// Available and kube-apiserver serves the group's OpenAPI (it merges an
// aggregated server's OpenAPI a little after Available, and kubectl
// validates against it), after at most a minute. Running it again updates
// the registration.
func (cp *ControlPlane) RegisterAPIService(ctx context.Context, path string, port int) error {
	return cp.registerAPIService(ctx, path, port, true)
}

// RegisterAPIServiceWithoutOpenAPI is RegisterAPIService for a test's
// own aggregated server that publishes no OpenAPI (kubectl validation is
// not used on it): it returns once the APIService is Available.
func (cp *ControlPlane) RegisterAPIServiceWithoutOpenAPI(ctx context.Context, path string, port int) error {
	return cp.registerAPIService(ctx, path, port, false)
}

func (cp *ControlPlane) registerAPIService(ctx context.Context, path string, port int, openAPI bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var want apiregistrationv1.APIService
	if err := yaml.UnmarshalStrict(raw, &want); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if want.Spec.Service == nil {
		return fmt.Errorf("%s: the APIService names no service", path)
	}
	kube, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: want.Spec.Service.Name + "-local", Namespace: want.Spec.Service.Namespace},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}
	if _, err := kube.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	p := int32(port)
	want.Spec.Service.Name, want.Spec.Service.Port = svc.Name, &p
	if _, inject := want.Annotations[injectCAFrom]; inject && len(want.Spec.CABundle) == 0 {
		if want.Spec.CABundle, err = os.ReadFile(cp.ServingCA.CertPath); err != nil {
			return err
		}
	}

	agg, err := aggregatorclient.NewForConfig(cp.admin)
	if err != nil {
		return err
	}
	apiservices := agg.ApiregistrationV1().APIServices()
	if got, err := apiservices.Get(ctx, want.Name, metav1.GetOptions{}); err == nil {
		got.Spec = want.Spec
		if _, err := apiservices.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update APIService %s: %w", want.Name, err)
		}
	} else if _, err := apiservices.Create(ctx, &want, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create APIService %s: %w", want.Name, err)
	}

	openapi := []byte(`"` + want.Spec.Group + `"`)
	rc := kube.Discovery().RESTClient()
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := apiservices.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		available := false
		for _, c := range got.Status.Conditions {
			if c.Type == apiregistrationv1.Available {
				available = c.Status == apiregistrationv1.ConditionTrue
				last = c.Reason + ": " + c.Message
			}
		}
		if !available || !openAPI {
			return available, nil
		}
		last = "Available, but kube-apiserver does not serve the group's OpenAPI yet"
		v3, err := rc.Get().AbsPath("/openapi/v3/apis", want.Spec.Group, want.Spec.Version).DoRaw(ctx)
		if err != nil || !bytes.Contains(v3, openapi) {
			return false, nil
		}
		v2, err := rc.Get().AbsPath("/openapi/v2").DoRaw(ctx)
		return err == nil && bytes.Contains(v2, openapi), nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s: %s: %w", want.Name, last, err)
	}
	return nil
}

// injectCAFrom is the annotation with which cert-manager's CA injector
// fills an APIService's caBundle from a Certificate's CA.
const injectCAFrom = "cert-manager.io/inject-ca-from"

// LocalServiceName is the name kube-apiserver verifies a server
// registered by RegisterAPIService for Service namespace/name by.
func LocalServiceName(namespace, name string) string {
	return name + "-local." + namespace + ".svc"
}
