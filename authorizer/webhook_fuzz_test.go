package authorizer

import (
	"encoding/json"
	"net/http"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// FuzzWebhook feeds arbitrary bodies to the webhook. Whatever comes in, it
// must answer 200 with a review or 400 with a Status, never panic, and
// never allow anyone but node-a to read node-a's objects.
//
//	go test ./authorizer -run '^$' -fuzz FuzzWebhook -fuzztime 60s
func FuzzWebhook(f *testing.F) {
	for _, seed := range []string{
		review(`{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"get","resource":"secrets","namespace":"ns","name":"secret-a"}}`),
		review(`{"user":"system:node:node-b","groups":["system:nodes"],"resourceAttributes":{"verb":"list","resource":"pods","fieldSelector":{"rawSelector":"spec.nodeName=node-a"}}}`),
		review(`{"user":"system:node:node-b","groups":["system:nodes"],"resourceAttributes":{"verb":"list","resource":"pods","fieldSelector":{"requirements":[{"key":"spec.nodeName","operator":"In","values":["node-b","node-a"]}]}}}`),
		review(`{"user":"x","nonResourceAttributes":{"verb":"get","path":"/"}}`),
		`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview"}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(seed))
	}
	h := &Webhook{Authorizer: fixture(f)}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := post(t, h, http.MethodPost, string(body))
		switch rec.Code {
		case http.StatusBadRequest:
			return
		case http.StatusOK:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var in, out authorizationv1.SubjectAccessReview
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("accepted a body that is not a review: %v", err)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("response is not a review: %v", err)
		}
		if out.Status.Denied {
			t.Fatalf("denied set")
		}
		ra := in.Spec.ResourceAttributes
		if out.Status.Allowed && ra != nil && in.Spec.User != "system:node:node-a" && (ra.Name == "secret-a" || ra.Name == "cm-a") {
			t.Fatalf("%s allowed to %s %s/%s", in.Spec.User, ra.Verb, ra.Resource, ra.Name)
		}
	})
}
