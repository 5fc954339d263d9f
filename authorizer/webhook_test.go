package authorizer

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func post(t *testing.T, h http.Handler, method, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, WebhookPath, strings.NewReader(body)))
	return rec
}

func review(spec string) string {
	return `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":` + spec + `}`
}

func TestWebhookAnswersReviews(t *testing.T) {
	h := &Webhook{Authorizer: fixture(t)}
	for _, tc := range []struct {
		name        string
		spec        string
		wantAllowed bool
	}{
		{"node reads its pod's secret",
			`{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"get","version":"v1","resource":"secrets","namespace":"ns","name":"secret-a"}}`, true},
		{"node reads another node's secret",
			`{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"get","version":"v1","resource":"secrets","namespace":"ns","name":"secret-b"}}`, false},
		{"node lists its pods, structured field selector",
			`{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"list","version":"v1","resource":"pods","fieldSelector":{"requirements":[{"key":"spec.nodeName","operator":"In","values":["node-a"]}]}}}`, true},
		{"node lists its pods, raw field selector",
			`{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"list","version":"v1","resource":"pods","fieldSelector":{"rawSelector":"spec.nodeName=node-a"}}}`, true},
		{"node lists pods with a NotIn selector",
			`{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"list","version":"v1","resource":"pods","fieldSelector":{"requirements":[{"key":"spec.nodeName","operator":"NotIn","values":["node-b"]}]}}}`, false},
		{"node lists pods with a malformed selector",
			`{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"list","version":"v1","resource":"pods","fieldSelector":{"rawSelector":"spec.nodeName"}}}`, false},
		{"someone else", `{"user":"alice","groups":["devs"],"resourceAttributes":{"verb":"get","version":"v1","resource":"secrets","namespace":"ns","name":"secret-a"}}`, false},
		{"non-resource", `{"user":"system:node:node-a","groups":["system:nodes"],"nonResourceAttributes":{"verb":"get","path":"/healthz"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := post(t, h, http.MethodPost, review(tc.spec))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var got authorizationv1.SubjectAccessReview
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != tc.wantAllowed {
				t.Errorf("allowed = %v (reason %q), want %v", got.Status.Allowed, got.Status.Reason, tc.wantAllowed)
			}
			if got.Status.Denied {
				t.Errorf("denied = true: refusals must leave RBAC its say")
			}
			if got.APIVersion != "authorization.k8s.io/v1" || got.Kind != "SubjectAccessReview" {
				t.Errorf("response is %s %s", got.APIVersion, got.Kind)
			}
		})
	}
}

func TestWebhookRefusesBadInput(t *testing.T) {
	h := &Webhook{Authorizer: fixture(t)}
	valid := `{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"get","resource":"secrets","namespace":"ns","name":"secret-a"}}`
	for _, tc := range []struct {
		name, method, body string
		wantCode           int
		wantMessage        string
	}{
		{"not JSON", http.MethodPost, `{"apiVersion":`, 400, "not a SubjectAccessReview"},
		{"a different kind", http.MethodPost, `{"apiVersion":"v1","kind":"Pod","spec":{}}`, 400, `kind "Pod"`},
		{"v1beta1", http.MethodPost, `{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":` + valid + `}`, 400, "subjectAccessReviewVersion: v1"},
		{"no user", http.MethodPost, review(`{"resourceAttributes":{"verb":"get","resource":"secrets"}}`), 400, "spec.user or spec.groups"},
		{"no attributes", http.MethodPost, review(`{"user":"system:node:node-a","groups":["system:nodes"]}`), 400, "exactly one of"},
		{"both attributes", http.MethodPost, review(`{"user":"u","resourceAttributes":{"verb":"get"},"nonResourceAttributes":{"verb":"get","path":"/"}}`), 400, "exactly one of"},
		{"oversized", http.MethodPost, review(`{"user":"` + strings.Repeat("x", MaxReviewBytes) + `"}`), 400, "exceeds"},
		{"GET", http.MethodGet, "", 405, "not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := post(t, h, tc.method, tc.body)
			if rec.Code != tc.wantCode {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.wantCode, rec.Body)
			}
			var status metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
				t.Fatalf("body is not a Status: %v: %s", err, rec.Body)
			}
			if status.Kind != "Status" || status.Status != metav1.StatusFailure || !strings.Contains(status.Message, tc.wantMessage) {
				t.Errorf("status = %+v, want a Failure saying %q", status, tc.wantMessage)
			}
		})
	}
}
