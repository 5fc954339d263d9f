package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

var authzScenario = Scenario{
	Name: "authz",
	Help: "node authorization decisions per second and their latency, in-process and through the SubjectAccessReview webhook over HTTPS",
	Run:  runAuthz,
}

// question is one authorization question and the answer it must get.
type question struct {
	attrs authorizer.AttributesRecord
	allow bool
}

// questions asks, for nodes spread over the cluster, about the objects of
// their own first pod (allowed) and the unique objects of the next node's
// (refused): the reads of a kubelet, and as many refusals. Shared objects
// of the other pod are left out: its node may reach them too.
func questions(s workload.Shape, c *workload.Cluster, n int) []question {
	var qs []question
	for i := 0; len(qs) < n; i++ {
		own := c.Pods[(i*s.PodsPerNode)%len(c.Pods)]
		other := c.Pods[((i+1)*s.PodsPerNode)%len(c.Pods)]
		node := &user.DefaultInfo{Name: "system:node:" + own.Spec.NodeName, Groups: []string{user.NodesGroup}}
		before := len(qs)
		for _, p := range []struct {
			pod   *corev1.Pod
			allow bool
		}{{own, true}, {other, own.Spec.NodeName == other.Spec.NodeName}} {
			pod := p.pod
			for _, v := range pod.Spec.Volumes {
				a := authorizer.AttributesRecord{User: node, Verb: "get", ResourceRequest: true, APIVersion: "v1", Namespace: pod.Namespace}
				switch {
				case v.Secret != nil:
					a.Resource, a.Name = "secrets", v.Secret.SecretName
				case v.ConfigMap != nil:
					a.Resource, a.Name = "configmaps", v.ConfigMap.Name
				case v.PersistentVolumeClaim != nil:
					a.Resource, a.Name = "persistentvolumeclaims", v.PersistentVolumeClaim.ClaimName
				default:
					continue
				}
				if !p.allow && strings.HasSuffix(a.Name, "-shared") {
					continue
				}
				qs = append(qs, question{attrs: a, allow: p.allow})
			}
		}
		if len(qs) == before {
			return nil // pods without volumes: nothing to ask
		}
	}
	return qs[:n]
}

func runAuthz(ctx context.Context, env *Env) (*Result, error) {
	r := &Result{Scenario: "authz"}
	g := graph.New()
	env.Cluster.WriteTo(g)
	a := nodeauthorizer.New(g)
	qs := questions(env.Shape, env.Cluster, 10000)
	if len(qs) == 0 {
		return nil, fmt.Errorf("authz: the shape's pods use no secret, configmap or claim: nothing to ask")
	}
	check := func(q *question, d authorizer.Decision) error {
		if (d == authorizer.DecisionAllow) != q.allow {
			return fmt.Errorf("authz: %s asking %s %s/%s got %v, want allowed=%v: the graph is wrong, the figures would be meaningless",
				q.attrs.User.GetName(), q.attrs.Resource, q.attrs.Namespace, q.attrs.Name, d, q.allow)
		}
		return nil
	}

	// Throughput, one goroutine then one per CPU, without clocks in the
	// loop; then latency per call, clock reads included.
	env.progressf("authz: in-process decisions for %s, one goroutine", env.PhaseDuration)
	n, err := untilDeadline(ctx, env.PhaseDuration, 1, 256, func(i int) error {
		q := &qs[i%len(qs)]
		d, _, _ := a.Authorize(ctx, &q.attrs)
		return check(q, d)
	})
	if n.seconds > 0 {
		r.Figures = append(r.Figures, Figure{Name: "in-process decisions, 1 goroutine", Value: float64(n.count) / n.seconds, Unit: "/s"})
	}
	if err != nil {
		return interrupted(ctx, r, err)
	}
	procs := runtime.GOMAXPROCS(0)
	env.progressf("authz: in-process decisions for %s, %d goroutines", env.PhaseDuration, procs)
	n, err = untilDeadline(ctx, env.PhaseDuration, procs, 256, func(i int) error {
		q := &qs[i%len(qs)]
		d, _, _ := a.Authorize(ctx, &q.attrs)
		return check(q, d)
	})
	if n.seconds > 0 {
		r.Figures = append(r.Figures, Figure{Name: fmt.Sprintf("in-process decisions, %d goroutines", procs), Value: float64(n.count) / n.seconds, Unit: "/s"})
	}
	if err != nil {
		return interrupted(ctx, r, err)
	}
	samples := make([]time.Duration, 0, 100000)
	for i := range cap(samples) {
		q := &qs[i%len(qs)]
		start := time.Now()
		a.Authorize(ctx, &q.attrs)
		samples = append(samples, time.Since(start))
	}
	r.Latencies = append(r.Latencies, latencyOf("in-process decision", samples))

	// The webhook: kube-apiserver's view, JSON over HTTPS.
	hs := httptest.NewTLSServer(&nodeauthorizer.Webhook{Authorizer: a})
	defer hs.Close()
	const callers = 32
	client := hs.Client()
	// One kept-alive connection per caller, as kube-apiserver keeps
	// them: the default of 2 idle connections per host would make most
	// reviews pay a TLS handshake.
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = callers
	env.progressf("authz: webhook SubjectAccessReviews over HTTPS for %s, %d callers", env.PhaseDuration, callers)
	var mu sync.Mutex
	var webhook []time.Duration
	n, err = untilDeadline(ctx, env.PhaseDuration, callers, 1, func(i int) error {
		q := &qs[i%len(qs)]
		start := time.Now()
		allowed, err := askWebhook(ctx, client, hs.URL+nodeauthorizer.WebhookPath, &q.attrs)
		took := time.Since(start)
		if err != nil {
			return err
		}
		d := authorizer.DecisionNoOpinion
		if allowed {
			d = authorizer.DecisionAllow
		}
		mu.Lock()
		webhook = append(webhook, took)
		mu.Unlock()
		return check(q, d)
	})
	if n.seconds > 0 {
		r.Figures = append(r.Figures, Figure{Name: fmt.Sprintf("webhook reviews over HTTPS, %d callers", callers), Value: float64(n.count) / n.seconds, Unit: "/s"})
		r.Latencies = append(r.Latencies, latencyOf("webhook review over HTTPS", webhook))
	}
	if err != nil {
		return interrupted(ctx, r, err)
	}
	return r, nil
}

// askWebhook posts a SubjectAccessReview for attrs, as kube-apiserver's
// webhook authorizer does, and returns status.allowed.
func askWebhook(ctx context.Context, client *http.Client, url string, attrs *authorizer.AttributesRecord) (bool, error) {
	review := authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: attrs.User.GetName(), Groups: attrs.User.GetGroups(),
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: attrs.Verb, Version: attrs.APIVersion, Resource: attrs.Resource, Namespace: attrs.Namespace, Name: attrs.Name,
			},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return false, fmt.Errorf("webhook: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, fmt.Errorf("webhook: %s: %s", resp.Status, b)
	}
	var answer authorizationv1.SubjectAccessReview
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return false, fmt.Errorf("webhook answer: %w", err)
	}
	return answer.Status.Allowed, nil
}

// counted is how many calls a timed phase made, over how long.
type counted struct {
	count   int64
	seconds float64
}

// untilDeadline calls f(i) with i = 0, 1, ... from workers goroutines
// until d has passed, ctx ends or a call fails. Each worker looks at the
// clock every chunk calls: 256 for calls of nanoseconds, 1 for calls of
// milliseconds, which would otherwise overrun the phase.
func untilDeadline(ctx context.Context, d time.Duration, workers, chunk int, f func(i int) error) (counted, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, d, errPhaseDone)
	defer cancel()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				for range chunk {
					if err := f(int(next.Add(1) - 1)); err != nil {
						failed.CompareAndSwap(nil, &err)
						cancel()
						return
					}
				}
			}
		})
	}
	wg.Wait()
	c := counted{count: next.Load(), seconds: time.Since(start).Seconds()}
	if err := failed.Load(); err != nil {
		return c, *err
	}
	if cause := context.Cause(ctx); cause != errPhaseDone {
		return c, cause
	}
	return c, nil
}

var errPhaseDone = fmt.Errorf("phase done")
