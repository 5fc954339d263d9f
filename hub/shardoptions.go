package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ShardOptions make the hub one of several replicas that each serve a
// share of the nodes (docs/architecture.md, "Sharding"). Service empty,
// the default: the hub is unsharded and serves every node.
type ShardOptions struct {
	// Service is the headless Service whose EndpointSlices list the
	// replicas.
	Service string
	// Member is this replica's stable name, as the Service's
	// EndpointSlices name it (a StatefulSet's pod name).
	Member string
	// Namespace is the Service's, and the replicas'.
	Namespace string
	// PeerCAFile is the CA that signed the replicas' serving
	// certificates, which a replica verifies another's with when it
	// forwards a SubjectAccessReview to it; empty: reviews are not
	// forwarded, and a replica decides for a node it does not hold from
	// kube-apiserver's list of the node's pods.
	PeerCAFile string
	// PeerDial, when set, dials the other replicas in place of the
	// network's DNS (tests, whose replicas have no DNS names). No flag.
	PeerDial func(ctx context.Context, network, address string) (net.Conn, error)
}

// serviceAccountNamespaceFile is where a pod's namespace is mounted with
// its ServiceAccount token.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// AddFlags adds the sharding flags to fs.
func (o *ShardOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Service, "shard-service", o.Service,
		"Headless Service whose EndpointSlices list the hub's replicas: each replica then holds a share of the nodes and serves those of its share whose replica is ready, "+
			"and sends a node that another replica serves there with 307 (docs/api.md, \"Sharded replicas\"). Empty: unsharded, every replica serves every node.")
	fs.StringVar(&o.Member, "shard-member", o.Member,
		"This replica's stable name, as the Service's EndpointSlices name it (the endpoint's hostname: a StatefulSet's pod name). "+
			"Default: the POD_NAME environment variable, else the hostname.")
	fs.StringVar(&o.PeerCAFile, "shard-peer-ca-file", o.PeerCAFile,
		"CA certificate (PEM) that signed the replicas' serving certificates: a replica asked by kube-apiserver's authorization webhook about a node it does not hold "+
			"forwards the review to the replica that does, verified with it. Empty: it decides from kube-apiserver's list of the node's pods instead (docs/operations.md).")
	fs.StringVar(&o.Namespace, "shard-namespace", o.Namespace,
		"Namespace of --shard-service. Default: the POD_NAMESPACE environment variable, else the namespace of the pod's ServiceAccount ("+serviceAccountNamespaceFile+").")
}

// complete fills Member and Namespace, when sharded, from the pod's
// environment.
func (o *ShardOptions) complete(getenv func(string) string, hostname func() (string, error), readFile func(string) ([]byte, error)) error {
	if o.Service == "" {
		return nil
	}
	if o.Member == "" {
		o.Member = getenv("POD_NAME")
	}
	if o.Member == "" {
		h, err := hostname()
		if err != nil {
			return fmt.Errorf("--shard-member not given, POD_NAME unset, and no hostname: %w", err)
		}
		// A StatefulSet's pod's hostname is its name; elsewhere only
		// the first label could be one.
		o.Member, _, _ = strings.Cut(h, ".")
	}
	if o.Namespace == "" {
		o.Namespace = getenv("POD_NAMESPACE")
	}
	if o.Namespace == "" {
		b, err := readFile(serviceAccountNamespaceFile)
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("--shard-namespace not given, POD_NAMESPACE unset: %w", err)
		}
		o.Namespace = strings.TrimSpace(string(b))
	}
	return nil
}

// validate returns every problem with the sharding flags.
func (o *ShardOptions) validate() []error {
	if o.Service == "" {
		if o.Member != "" || o.Namespace != "" || o.PeerCAFile != "" {
			return []error{errors.New("--shard-member, --shard-namespace and --shard-peer-ca-file need --shard-service: without it the hub is unsharded")}
		}
		return nil
	}
	var errs []error
	// A replica's stable name is <member>.<service>.<namespace>.svc:
	// each part one DNS label.
	for _, f := range []struct{ flag, value string }{
		{"--shard-service", o.Service}, {"--shard-member", o.Member}, {"--shard-namespace", o.Namespace},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s: empty (see its default in --help)", f.flag))
			continue
		}
		if msgs := validation.IsDNS1123Label(f.value); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a DNS label, as a part of the replicas' stable names must be: %s", f.flag, f.value, strings.Join(msgs, "; ")))
		}
	}
	return errs
}
