package hub

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// TestReviewsOmitTheCredentialID: two kube-proxies, each with a token of
// its own (a credential ID each) of one ServiceAccount, are asked about
// as one caller, so that one cached review answers both; everything else
// of the attributes reaches the delegated authorizer as it was.
func TestReviewsOmitTheCredentialID(t *testing.T) {
	var asked []authorizer.Attributes
	w := withoutCredentialID{authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		asked = append(asked, a)
		return authorizer.DecisionAllow, "", nil
	})}
	label, err := labels.NewRequirement("service.kubernetes.io/service-proxy-name", selection.DoesNotExist, nil)
	if err != nil {
		t.Fatal(err)
	}
	proxy := func(credential string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{
			User: &user.DefaultInfo{
				Name: "system:serviceaccount:kube-system:kube-proxy", UID: "uid-1",
				Groups: []string{"system:serviceaccounts", "system:authenticated"},
				Extra: map[string][]string{
					user.CredentialIDKey:                     {credential},
					"authentication.kubernetes.io/node-name": {"node-a"},
				},
			},
			Verb: "watch", APIVersion: "v1", Resource: "services", ResourceRequest: true, Path: "/api/v1/services",
			FieldSelectorRequirements: fields.Requirements{{Operator: selection.NotEquals, Field: "spec.clusterIP", Value: "None"}},
			LabelSelectorRequirements: labels.Requirements{*label},
		}
	}
	for _, credential := range []string{"JTI=one", "JTI=two"} {
		a := proxy(credential)
		if d, _, err := w.Authorize(context.Background(), a); d != authorizer.DecisionAllow || err != nil {
			t.Fatalf("%s: %v %v", credential, d, err)
		}
	}
	if len(asked) != 2 || !reflect.DeepEqual(asked[0], asked[1]) {
		t.Fatalf("the two tokens were asked about differently:\n%#v\n%#v", asked[0], asked[len(asked)-1])
	}
	want := proxy("")
	delete(want.User.(*user.DefaultInfo).Extra, user.CredentialIDKey)
	if !reflect.DeepEqual(asked[0], want) {
		t.Errorf("asked\n%#v\nwant\n%#v", asked[0], want)
	}

	// A caller without a credential ID is passed on as it is.
	asked = nil
	node := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "list", Resource: "services", ResourceRequest: true}
	if _, _, err := w.Authorize(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || !reflect.DeepEqual(asked[0], authorizer.Attributes(node)) {
		t.Errorf("a caller without a credential ID was rewritten: %#v", asked)
	}
}
