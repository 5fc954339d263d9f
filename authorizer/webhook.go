package authorizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
)

// WebhookPath is where kube-apiserver's webhook authorizer posts
// SubjectAccessReviews.
const WebhookPath = "/authorize"

// MaxReviewBytes bounds a SubjectAccessReview body. kube-apiserver's are
// well under 4 KiB; 64 KiB leaves room for long group lists and extra
// values while keeping a flood of large bodies cheap to refuse.
const MaxReviewBytes = 64 << 10

// Webhook serves SubjectAccessReviews (authorization.k8s.io/v1) from
// kube-apiserver's webhook authorizer. Callers are authenticated and
// authorized by the server it is mounted on, as for any other path.
type Webhook struct {
	Authorizer authorizer.Authorizer
	// Shards, when set, answers the reviews about nodes this replica
	// does not hold (shards.go); nil for an unsharded hub.
	Shards *Shards
}

func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeStatus(w, apierrors.NewMethodNotSupported(authorizationv1.Resource("subjectaccessreviews"), r.Method), "method")
		return
	}
	review, body, reason, err := decodeReview(r)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()), reason)
		return
	}
	attrs := attributesFrom(&review.Spec)
	resource := metricResource(attrs.Resource, attrs.ResourceRequest)
	start := time.Now()
	var decision authorizer.Decision
	var why string
	var away routed // a review about a node this replica does not hold
	isAway := false
	if h.Shards != nil {
		away, isAway = h.Shards.route(r.Context(), r.Header.Get(ForwardedHeader), body, attrs)
		path := pathLocal
		if isAway {
			path = away.path
		}
		routedReviews.WithLabelValues(path).Inc()
	}
	switch {
	case !isAway:
		decision, why, err = h.Authorizer.Authorize(r.Context(), attrs)
	case away.status != nil:
		// A peer's answer goes back as the peer gave it.
		routedDuration.WithLabelValues(away.path).Observe(time.Since(start).Seconds())
		review.Status = *away.status
		decisions.WithLabelValues(resource, statusDecision(&review.Status)).Inc()
		writeReview(w, review)
		return
	default:
		decision, why, err = away.decision, away.reason, away.err
	}
	if isAway {
		routedDuration.WithLabelValues(away.path).Observe(time.Since(start).Seconds())
	} else {
		decisionDuration.WithLabelValues(resource).Observe(time.Since(start).Seconds())
	}

	review.Status = authorizationv1.SubjectAccessReviewStatus{Reason: why}
	switch {
	case err != nil:
		// Never an allow on error: no opinion, with the error for the log
		// of whoever asked.
		review.Status.EvaluationError = err.Error()
		decisions.WithLabelValues(resource, "error").Inc()
	case decision == authorizer.DecisionAllow:
		review.Status.Allowed = true
		decisions.WithLabelValues(resource, "allow").Inc()
	case decision == authorizer.DecisionDeny:
		review.Status.Denied = true
		decisions.WithLabelValues(resource, "deny").Inc()
	default:
		// NoOpinion: denied stays false so that the authorizers after the
		// webhook (RBAC) still decide.
		decisions.WithLabelValues(resource, "no_opinion").Inc()
	}
	writeReview(w, review)
}

func writeReview(w http.ResponseWriter, review *authorizationv1.SubjectAccessReview) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(review); err != nil {
		klog.V(2).InfoS("Writing SubjectAccessReview response failed", "err", err)
	}
}

// statusDecision is a peer's answer as the decisions metric names it.
func statusDecision(s *authorizationv1.SubjectAccessReviewStatus) string {
	switch {
	case s.EvaluationError != "":
		return "error"
	case s.Allowed:
		return "allow"
	case s.Denied:
		return "deny"
	}
	return "no_opinion"
}

// decodeReview reads and checks a SubjectAccessReview, and returns it
// with its body as it arrived (what a sharded replica forwards). The
// reason is a short label for the metric of refusals.
func decodeReview(r *http.Request) (*authorizationv1.SubjectAccessReview, []byte, string, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxReviewBytes+1))
	if err != nil {
		return nil, nil, "read", fmt.Errorf("reading the request body: %w", err)
	}
	if len(body) > MaxReviewBytes {
		return nil, nil, "too_large", fmt.Errorf("the request body exceeds %d bytes", MaxReviewBytes)
	}
	review := &authorizationv1.SubjectAccessReview{}
	if err := json.Unmarshal(body, review); err != nil {
		return nil, nil, "malformed", fmt.Errorf("the request body is not a SubjectAccessReview: %w", err)
	}
	if gv := authorizationv1.SchemeGroupVersion.String(); review.APIVersion != gv || review.Kind != "SubjectAccessReview" {
		return nil, nil, "kind", fmt.Errorf("expected apiVersion %q and kind \"SubjectAccessReview\", got apiVersion %q and kind %q (set subjectAccessReviewVersion: v1 in the authorization configuration)", gv, review.APIVersion, review.Kind)
	}
	spec := &review.Spec
	if spec.User == "" && len(spec.Groups) == 0 {
		return nil, nil, "no_user", errors.New("spec.user or spec.groups must be set")
	}
	if (spec.ResourceAttributes == nil) == (spec.NonResourceAttributes == nil) {
		return nil, nil, "attributes", errors.New("exactly one of spec.resourceAttributes and spec.nonResourceAttributes must be set")
	}
	return review, body, "", nil
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError, reason string) {
	rejectedReviews.WithLabelValues(reason).Inc()
	status := err.Status()
	status.APIVersion, status.Kind = "v1", "Status"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(&status)
}

// attributesFrom turns a review into the attributes an authorizer decides
// on, as kube-apiserver does for its own SubjectAccessReview API: the
// version defaults to "*", and label and field selectors come from their
// requirements when given, or else from the raw selector. Selectors that
// do not parse keep their error beside whatever requirements did, so an
// authorizer can refuse on them; nodeproxy's only ever grant on a
// requirement that parsed.
func attributesFrom(spec *authorizationv1.SubjectAccessReviewSpec) *authorizer.AttributesRecord {
	u := &user.DefaultInfo{Name: spec.User, UID: spec.UID, Groups: spec.Groups}
	if len(spec.Extra) > 0 {
		u.Extra = make(map[string][]string, len(spec.Extra))
		for k, v := range spec.Extra {
			u.Extra[k] = v
		}
	}
	if na := spec.NonResourceAttributes; na != nil {
		return &authorizer.AttributesRecord{User: u, Verb: na.Verb, Path: na.Path}
	}
	ra := spec.ResourceAttributes
	attrs := &authorizer.AttributesRecord{
		User: u, Verb: ra.Verb, Namespace: ra.Namespace, APIGroup: ra.Group, APIVersion: ra.Version,
		Resource: ra.Resource, Subresource: ra.Subresource, Name: ra.Name, ResourceRequest: true,
	}
	if attrs.APIVersion == "" {
		attrs.APIVersion = "*"
	}
	if fs := ra.FieldSelector; fs != nil {
		if fs.RawSelector != "" {
			sel, err := fields.ParseSelector(fs.RawSelector)
			if err != nil {
				attrs.FieldSelectorParsingErr = err
			} else {
				attrs.FieldSelectorRequirements = sel.Requirements()
			}
		}
		if len(fs.Requirements) > 0 {
			attrs.FieldSelectorRequirements, attrs.FieldSelectorParsingErr = fieldRequirements(fs.Requirements)
		}
	}
	if ls := ra.LabelSelector; ls != nil {
		if ls.RawSelector != "" {
			sel, err := labels.Parse(ls.RawSelector)
			if err != nil {
				attrs.LabelSelectorParsingErr = err
			} else {
				attrs.LabelSelectorRequirements, _ = sel.Requirements()
			}
		}
		if len(ls.Requirements) > 0 {
			attrs.LabelSelectorRequirements, attrs.LabelSelectorParsingErr = labelRequirements(ls.Requirements)
		}
	}
	return attrs
}

// fieldRequirements converts structured field requirements: In and NotIn
// with one value become = and !=, the only field operators there are.
func fieldRequirements(in []metav1.FieldSelectorRequirement) (fields.Requirements, error) {
	var out fields.Requirements
	var errs []error
	for _, r := range in {
		if len(r.Values) != 1 {
			errs = append(errs, fmt.Errorf("field selector on %q: %s needs exactly one value", r.Key, r.Operator))
			continue
		}
		switch r.Operator {
		case metav1.FieldSelectorOpIn:
			out = append(out, fields.Requirement{Field: r.Key, Operator: selection.Equals, Value: r.Values[0]})
		case metav1.FieldSelectorOpNotIn:
			out = append(out, fields.Requirement{Field: r.Key, Operator: selection.NotEquals, Value: r.Values[0]})
		default:
			errs = append(errs, fmt.Errorf("field selector on %q: operator %q is not supported", r.Key, r.Operator))
		}
	}
	return out, errors.Join(errs...)
}

var labelOps = map[metav1.LabelSelectorOperator]selection.Operator{
	metav1.LabelSelectorOpIn:           selection.In,
	metav1.LabelSelectorOpNotIn:        selection.NotIn,
	metav1.LabelSelectorOpExists:       selection.Exists,
	metav1.LabelSelectorOpDoesNotExist: selection.DoesNotExist,
}

func labelRequirements(in []metav1.LabelSelectorRequirement) (labels.Requirements, error) {
	var out labels.Requirements
	var errs []error
	for _, r := range in {
		op, ok := labelOps[r.Operator]
		if !ok {
			errs = append(errs, fmt.Errorf("label selector on %q: operator %q is not supported", r.Key, r.Operator))
			continue
		}
		req, err := labels.NewRequirement(r.Key, op, r.Values)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, *req)
	}
	return out, errors.Join(errs...)
}
