package hub

import (
	"net/http"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
)

// TestAConnectionThroughTheAggregatorGetsTheShorterAge: the hub cannot
// authenticate again the caller of a connection a front proxy made (it
// holds only the proxy's certificate and the caller's name in headers),
// so that connection ends at the aggregated age; a direct one, whose
// caller is checked every interval, at the direct age.
func TestAConnectionThroughTheAggregatorGetsTheShorterAge(t *testing.T) {
	proxy := &authenticatorfactory.RequestHeaderConfig{
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
	}
	a := ages{direct: 6 * time.Hour, aggregated: time.Hour, frontProxy: proxy}
	for _, tc := range []struct {
		name   string
		header http.Header
		ages   ages
		want   time.Duration
	}{
		{"a bearer token, directly", http.Header{"Authorization": {"Bearer t"}}, a, 6 * time.Hour},
		{"a client certificate, directly", http.Header{}, a, 6 * time.Hour},
		{"the front proxy's user header", http.Header{"X-Remote-User": {"alice"}}, a, time.Hour},
		{"the front proxy's group header alone", http.Header{"X-Remote-Group": {"devs"}}, a, time.Hour},
		{"an extra header, any case", http.Header{"x-remote-extra-scope": {"x"}}, a, time.Hour},
		{"the headers with no front proxy trusted", http.Header{"X-Remote-User": {"alice"}}, ages{direct: 6 * time.Hour, aggregated: time.Hour}, 6 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ages.of(&credential{header: tc.header}); got != tc.want {
				t.Errorf("maximum age %s, want %s", got, tc.want)
			}
		})
	}
}
