// Command nodeproxy-node-podadmit checks one pod posted to the Pod API of
// nodeproxy-node, which runs it beside itself for each POST: the posted
// body on stdin, and on stdout the pod to store (kind Pod) or the Status
// refusing it (kind Status); it exits non-zero, saying why on stderr,
// only when it could not check. It is the endpoint's and shipped with it
// (make build, the node's image); nothing else calls it.
//
// A process of its own, so that the endpoint does not link
// k8s.io/kubernetes, whose packages register every feature gate at start
// on every node (package podapi/admission; docs/architecture.md, "The
// Pod API").
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	npcli "github.com/nodeproxy/nodeproxy/internal/cli"
	"github.com/nodeproxy/nodeproxy/podapi/admission"
)

// maxBody bounds what is read: the endpoint passes at most its own
// bound (1 MiB), kube-apiserver's is 3 MiB.
const maxBody = 3 << 20

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nodeproxy-node-podadmit:", err)
		os.Exit(1)
	}
}

func run(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("nodeproxy-node-podadmit", flag.ContinueOnError)
	node := fs.String("node", "", "The node the pod is for: it is named <pod>-<node> and bound to it.")
	version := fs.Bool("version", false, "Print the version and exit; the endpoint runs only the helper of its own version.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version {
		_, err := fmt.Fprintln(out, npcli.Version())
		return err
	}
	if *node == "" || fs.NArg() > 0 {
		return errors.New("usage: nodeproxy-node-podadmit --node NAME < pod.json")
	}
	body, err := io.ReadAll(io.LimitReader(in, maxBody+1))
	if err != nil {
		return fmt.Errorf("read the pod: %w", err)
	}
	if len(body) > maxBody {
		return fmt.Errorf("the pod is larger than %d bytes", maxBody)
	}
	var answer any
	if pod, refused := admission.Admit(body, *node); refused != nil {
		s := refused.ErrStatus
		s.APIVersion, s.Kind = "v1", "Status"
		answer = &s
	} else {
		pod.APIVersion, pod.Kind = "v1", "Pod"
		answer = pod
	}
	if err := json.NewEncoder(out).Encode(answer); err != nil {
		return fmt.Errorf("write the answer: %w", err)
	}
	return nil
}
