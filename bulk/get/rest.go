package get

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// REST is the bulkgetoperations resource: create only, like TokenReview.
// Nothing is stored; the created object comes back with its results.
type REST struct {
	getter   *Getter
	limits   Limits
	inFlight *inFlight
}

var (
	_ rest.Creater                  = (*REST)(nil)
	_ rest.Scoper                   = (*REST)(nil)
	_ rest.SingularNameProvider     = (*REST)(nil)
	_ rest.GroupVersionKindProvider = (*REST)(nil)
)

// NewREST serves bulkgetoperations from g, within l.
func NewREST(g *Getter, l Limits) *REST {
	return &REST{getter: g, limits: l, inFlight: newInFlight(l.MaxInFlightPerUser)}
}

// New returns an empty BulkGetOperation.
func (r *REST) New() runtime.Object { return &v1alpha1.BulkGetOperation{} }

// Destroy releases nothing: the cache outlives the resource.
func (r *REST) Destroy() {}

// NamespaceScoped is false: one request may read many namespaces.
func (r *REST) NamespaceScoped() bool { return false }

// GetSingularName is what kubectl prints.
func (r *REST) GetSingularName() string { return "bulkgetoperation" }

// GroupVersionKind is the kind this resource serves in every version.
func (r *REST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return v1alpha1.SchemeGroupVersion.WithKind("BulkGetOperation")
}

// Create answers the operations of obj. The answer it returns is written
// from the cache as the server encodes it (streamedOperation); the
// caller's in-flight slot is held until then, or until the request ends.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	op, ok := obj.(*v1alpha1.BulkGetOperation)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a BulkGetOperation: %T", obj))
	}
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("no user in the request context"))
	}
	release, err := r.inFlight.acquire(u.GetName())
	if err != nil {
		observeRequest(outcomeTooManyInFlight)
		return nil, err
	}
	done := once(release)
	context.AfterFunc(ctx, done)
	answer, err := r.answer(ctx, u, op, createValidation)
	if err != nil {
		done()
		return nil, err
	}
	// The generic create handler records managed fields as for a stored
	// object; nothing is stored, so they would only echo noise back.
	op.ManagedFields = nil
	return &streamedOperation{BulkGetOperation: op, answer: answer, done: done}, nil
}

func (r *REST) answer(ctx context.Context, u user.Info, op *v1alpha1.BulkGetOperation, createValidation rest.ValidateObjectFunc) (*Answer, error) {
	if createValidation != nil {
		if err := createValidation(ctx, op.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	return r.getter.Answer(ctx, u, &op.Spec, r.limits.MaxAnswerBytes)
}
