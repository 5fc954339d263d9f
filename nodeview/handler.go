package nodeview

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// Selects reports whether sel asks for a node view rather than a bulk
// watch channel: the hub's wiring routes on it.
func Selects(sel *v1alpha1.GetOperation) bool {
	r := sel.Resource
	_, known := v1alpha1.NodeViewTypesOf(r.Version)
	return r.Group == v1alpha1.NodeViewResource.Group && r.Resource == v1alpha1.NodeViewResource.Resource && known
}

// Handler opens node view channels: the watchmux.Handler for selectors
// Selects.
type Handler struct {
	views *Views
	spans *spans
}

// NewHandler opens views that views feeds. progress, if not nil, lets a
// view resume on a replica whose change logs begin after the position of
// a type that has not changed since (hub's asks kube-apiserver); without
// it such a resume gets ERROR 410.
func NewHandler(views *Views, progress bulk.Progress) *Handler {
	return &Handler{views: views, spans: newSpans(progress)}
}

var _ watchmux.Handler = (*Handler)(nil)

var viewResource = schema.GroupResource{Group: v1alpha1.GroupName, Resource: v1alpha1.NodeViewResource.Resource}

// Open implements watchmux.Handler. A node may open only its own view,
// and nobody else may open one: what a view carries is what the graph
// lets that node read, which is no other user's right. A resume is held
// here until this replica can rebuild what the client holds (settle: at
// most 3 s, then 504), so that the client's fallback sees a refusal.
func (h *Handler) Open(ctx context.Context, sel *v1alpha1.GetOperation, sink watchmux.Sink) (func(), *metav1.Status) {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil, &apierrors.NewInternalError(errors.New("no user in the request context")).ErrStatus
	}
	node, viewTypes, from, resume, err := parseSelector(sel)
	if err != nil {
		return nil, statusOf(err)
	}
	if self, isNode := nodeauthorizer.NodeName(u); !isNode || self != node {
		opens.WithLabelValues(openRefused).Inc()
		return nil, &apierrors.NewForbidden(viewResource, node,
			fmt.Errorf("User %q cannot watch the node view of %q: a node may open only its own view", u.GetName(), node)).ErrStatus
	}
	if resume {
		// Type by type at once: a replica that started after the
		// serving one asks kube-apiserver about each quiet type, about a
		// second each, and one after the other they would outlast the
		// client's wait for its channel to be carried over.
		var g errgroup.Group
		for i, s := range h.views.stores {
			if !viewTypes.Has(i) {
				continue // the consumer holds none of it: nothing to settle
			}
			g.Go(func() error { return h.settle(ctx, i, s, &from) }) // each its own from.Since[i], from.At[i]
		}
		if err := g.Wait(); err != nil {
			opens.WithLabelValues(openRefused).Inc()
			return nil, statusOf(err)
		}
	}
	v := newView(node, viewTypes, sink, h.views.live, h.views)
	sink.OnClose(func() { h.views.remove(v) })
	if ps, ok := sink.(watchmux.ProgressSink); ok {
		ps.OnProgress(func(token string) { h.views.requestProgress(v, token) })
	}
	return func() { h.views.join(v, from, resume) }, nil
}

// resumeWait bounds how long a resume waits for this replica's cache to
// have what the consumer holds: kube-apiserver's watch cache waits 3 s
// before its 504 "Too large resource version", and so do bulk reads.
const resumeWait = 3 * time.Second

// settle makes sure this replica can rebuild what the consumer holds of
// type i, as from says it holds it, adjusting from to versions this
// replica can read.
//
// The store must have every change the consumer has: up to from.Since,
// not from.At, which may be the serving replica's own bookmark of a
// quiet type that this one will not get for a minute. A store behind
// Since after the lag between replicas (bulk.StoreLagAllowance) either
// lacks changes still in flight, and catches up, or has not changed
// since its own version, older than the serving replica's start (a
// quiet type listed earlier), and will not move before its next
// bookmark. It waits for the store and asks kube-apiserver at once
// (spans): whichever settles it first, within resumeWait; then 504.
//
// A store whose change log begins after from.At (this replica started
// later) cannot show the state at At: kube-apiserver's word that the
// type has not changed since moves At to a version the log reaches.
func (h *Handler) settle(ctx context.Context, i int, s *cache.Store, from *Position) error {
	resource := types[i].gvr.Resource
	if !s.HasSynced() {
		// Nothing to rebuild from, and no version to ask kube-apiserver
		// about (bulk.ErrUnsynced): another replica, or this one listed.
		settles.WithLabelValues(resource, settleTooLarge).Inc()
		return bulk.TooLargeResourceVersion(from.Since[i], 0)
	}
	if rv := s.Snapshot().RV; rv < from.Since[i] {
		lag, cancel := context.WithTimeout(ctx, bulk.StoreLagAllowance)
		snap, _ := s.Await(lag, from.Since[i])
		cancel()
		if snap.RV < from.Since[i] {
			how, err := h.await(ctx, i, s, snap.RV, from)
			settles.WithLabelValues(resource, how).Inc()
			if err != nil {
				return err
			}
		}
	}
	if _, err := s.Snapshot().At(from.At[i]); errors.Is(err, cache.ErrExpired) {
		if through := h.spans.extend(ctx, i, from.At[i]); through > from.At[i] {
			from.At[i] = through
			settles.WithLabelValues(resource, settleUnchanged).Inc()
		}
	}
	return nil
}

// await waits for s, at rv, to reach from.Since[i], or for kube-apiserver
// to show that type i did not change since rv, whichever comes first.
func (h *Handler) await(ctx context.Context, i int, s *cache.Store, rv uint64, from *Position) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, resumeWait)
	defer cancel()
	since := from.Since[i] // the goroutines' copy: from changes below
	reached := make(chan *cache.Snapshot, 1)
	go func() {
		snap, _ := s.Await(wctx, since)
		reached <- snap
	}()
	proved := make(chan uint64, 1)
	go func() { proved <- h.spans.extend(wctx, i, rv) }()
	for {
		select {
		case through := <-proved:
			if through >= since {
				// The consumer's state of the type is the store's, at rv.
				from.Since[i], from.At[i] = rv, max(from.At[i], through)
				return settleUnchanged, nil
			}
			proved = nil
		case snap := <-reached:
			switch {
			case snap.RV >= since:
				return settleCaughtUp, nil
			case ctx.Err() != nil:
				return settleGone, apierrors.NewTimeoutError("request ended while waiting for the cache", 1)
			}
			return settleTooLarge, bulk.TooLargeResourceVersion(since, snap.RV)
		}
	}
}

// parseSelector reads a node view's selector: the node by
// metadata.name, and the position to resume from, if any. What a view
// cannot honour (other selectors, paging, an exact version, initial
// events with a position) is refused rather than ignored.
func parseSelector(sel *v1alpha1.GetOperation) (node string, viewTypes v1alpha1.NodeViewTypeSet, from Position, resume bool, err error) {
	path := field.NewPath("selector")
	opts := path.Child("options")
	var errs field.ErrorList
	viewTypes, _ = v1alpha1.NodeViewTypesOf(sel.Resource.Version) // Selects: a version of the view
	if sel.Namespace != "" {
		errs = append(errs, field.Forbidden(path.Child("namespace"), "a node view is not namespaced"))
	}
	o := sel.Options
	if o.LabelSelector != "" {
		errs = append(errs, field.Forbidden(opts.Child("labelSelector"), "a node view carries everything the node may read"))
	}
	if o.Limit != 0 || o.Continue != "" {
		errs = append(errs, field.Forbidden(opts.Child("limit"), "a node view is not paged"))
	}
	if o.ResourceVersionMatch != "" && o.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
		errs = append(errs, field.NotSupported(opts.Child("resourceVersionMatch"), o.ResourceVersionMatch, []metav1.ResourceVersionMatch{metav1.ResourceVersionMatchNotOlderThan}))
	}
	fs, ferr := fields.ParseSelector(o.FieldSelector)
	if ferr != nil {
		errs = append(errs, field.Invalid(opts.Child("fieldSelector"), o.FieldSelector, ferr.Error()))
	} else {
		name, named := fs.RequiresExactMatch("metadata.name")
		if !named || name == "" || len(fs.Requirements()) != 1 {
			errs = append(errs, field.Invalid(opts.Child("fieldSelector"), o.FieldSelector, "must be metadata.name=<node>, the node's own name"))
		}
		node = name
	}
	initial := o.SendInitialEvents
	switch rv := o.ResourceVersion; {
	case rv == "" || rv == "0":
		if initial != nil && !*initial {
			errs = append(errs, field.Invalid(opts.Child("sendInitialEvents"), false, "a node view from no position starts with its initial state"))
		}
	default:
		p, perr := ParsePosition(rv)
		switch {
		case perr != nil:
			errs = append(errs, field.Invalid(opts.Child("resourceVersion"), rv, perr.Error()))
		case p.Types != viewTypes:
			errs = append(errs, field.Invalid(opts.Child("resourceVersion"), rv,
				"a position of another version of the node view than "+sel.Resource.Version))
		}
		if initial != nil && *initial {
			errs = append(errs, field.Invalid(opts.Child("sendInitialEvents"), true, "a position resumes the view; the initial state comes only without one"))
		}
		from, resume = p, true
	}
	if len(errs) > 0 {
		return "", 0, from, false, apierrors.NewInvalid(schema.GroupKind{Group: v1alpha1.GroupName, Kind: v1alpha1.NodeViewKind}, node, errs)
	}
	return node, viewTypes, from, resume, nil
}

func statusOf(err error) *metav1.Status {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		return &s
	}
	return &apierrors.NewInternalError(err).ErrStatus
}
