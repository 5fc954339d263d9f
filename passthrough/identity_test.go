package passthrough

import (
	"errors"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/transport"
)

func TestImpersonationSendsWhatConstrainedModesAccept(t *testing.T) {
	extra := map[string][]string{"authentication.kubernetes.io/credential-id": {"X509SHA256=ab"}}
	for _, tc := range []struct {
		name    string
		user    user.Info
		want    transport.ImpersonationConfig
		wantErr error
	}{
		{"a user: everything as authenticated",
			&user.DefaultInfo{Name: "alice", UID: "u1", Groups: []string{"dev", user.AllAuthenticated}, Extra: extra},
			transport.ImpersonationConfig{UserName: "alice", UID: "u1", Groups: []string{"dev", user.AllAuthenticated}, Extra: extra}, nil},
		{"a node: its name alone",
			&user.DefaultInfo{Name: "system:node:node-a", Groups: []string{user.NodesGroup, user.AllAuthenticated}},
			transport.ImpersonationConfig{UserName: "system:node:node-a"}, nil},
		{"a ServiceAccount: its name alone",
			&user.DefaultInfo{Name: "system:serviceaccount:ns:sa", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns"}, Extra: extra},
			transport.ImpersonationConfig{UserName: "system:serviceaccount:ns:sa"}, nil},
		{"a node's name without system:nodes", &user.DefaultInfo{Name: "system:node:node-a", Groups: []string{"dev"}}, transport.ImpersonationConfig{}, errIdentity},
		{"a ServiceAccount's name without its groups", &user.DefaultInfo{Name: "system:serviceaccount:ns:sa"}, transport.ImpersonationConfig{}, errIdentity},
		{"a malformed ServiceAccount name", &user.DefaultInfo{Name: "system:serviceaccount:ns", Groups: []string{"system:serviceaccounts:ns"}}, transport.ImpersonationConfig{}, errIdentity},
		{"no name", &user.DefaultInfo{}, transport.ImpersonationConfig{}, errNoUser},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := impersonation(tc.user)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if got.UserName != tc.want.UserName || got.UID != tc.want.UID || len(got.Groups) != len(tc.want.Groups) || len(got.Extra) != len(tc.want.Extra) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
