package hub

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// TestShardFlagsDefaultFromThePod: sharded, a replica's name and
// namespace come from the pod (POD_NAME, POD_NAMESPACE, else the
// hostname's first label and the ServiceAccount's namespace file), the
// flags winning; unsharded, nothing is looked up.
func TestShardFlagsDefaultFromThePod(t *testing.T) {
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	host := func() (string, error) { return "nodeproxy-2.nodeproxy-shards.ns.svc.cluster.local", nil }
	file := func(string) ([]byte, error) { return []byte("from-file\n"), nil }
	noFile := func(string) ([]byte, error) { return nil, fs.ErrNotExist }
	for _, tc := range []struct {
		name       string
		in         ShardOptions
		env        map[string]string
		readFile   func(string) ([]byte, error)
		member, ns string
	}{
		{"unsharded looks nothing up", ShardOptions{}, map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "n"}, file, "", ""},
		{"from the environment", ShardOptions{Service: "s"}, map[string]string{"POD_NAME": "nodeproxy-0", "POD_NAMESPACE": "nodeproxy"}, file, "nodeproxy-0", "nodeproxy"},
		{"from the hostname and the ServiceAccount", ShardOptions{Service: "s"}, nil, file, "nodeproxy-2", "from-file"},
		{"flags win", ShardOptions{Service: "s", Member: "m", Namespace: "x"}, map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "n"}, file, "m", "x"},
		{"no namespace anywhere", ShardOptions{Service: "s"}, map[string]string{"POD_NAME": "p"}, noFile, "p", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.in
			if err := o.complete(env(tc.env), host, tc.readFile); err != nil {
				t.Fatal(err)
			}
			if o.Member != tc.member || o.Namespace != tc.ns {
				t.Errorf("member %q namespace %q, want %q %q", o.Member, o.Namespace, tc.member, tc.ns)
			}
		})
	}
	o := ShardOptions{Service: "s"}
	if err := o.complete(env(nil), func() (string, error) { return "", errors.New("no uts") }, file); err == nil || !strings.Contains(err.Error(), "--shard-member") {
		t.Errorf("no name anywhere: %v, want an error naming --shard-member", err)
	}
}

// TestShardFlagsAreDNSLabels: each flag is a label of the replicas'
// stable names, so each must be a DNS label; the member and namespace
// mean nothing without a Service.
func TestShardFlagsAreDNSLabels(t *testing.T) {
	for _, tc := range []struct {
		in   ShardOptions
		want []string // flags the errors name; none: valid
	}{
		{ShardOptions{}, nil},
		{ShardOptions{Service: "nodeproxy-shards", Member: "nodeproxy-0", Namespace: "nodeproxy"}, nil},
		{ShardOptions{Member: "nodeproxy-0"}, []string{"--shard-service"}},
		{ShardOptions{Service: "nodeproxy-shards"}, []string{"--shard-member", "--shard-namespace"}},
		{ShardOptions{Service: "Shards", Member: "a.b", Namespace: "nodeproxy"}, []string{"--shard-service", "--shard-member"}},
	} {
		errs := tc.in.validate()
		if len(errs) != len(tc.want) {
			t.Errorf("%+v: %v, want errors naming %v", tc.in, errs, tc.want)
			continue
		}
		for i, e := range errs {
			if !strings.Contains(e.Error(), tc.want[i]) {
				t.Errorf("%+v: %v, want it to name %s", tc.in, e, tc.want[i])
			}
		}
	}
}
