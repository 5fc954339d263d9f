package passthrough_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// countsServer is the smallest aggregated API server kube-apiserver will
// route to: TLS with a certificate from the control plane's serving CA,
// requests accepted only from kube-apiserver's front proxy (its client
// certificate; kube-apiserver has authorized the caller already), and
// one read-only, namespaced resource, counts in
// counts.test.nodeproxy.io/v1alpha1, that serves list and watch. A test
// changes a count with Increment. Bookmarks: one right after a watch's
// initial state, the only moment a test waits for one.
type countsServer struct {
	port int

	mu      sync.Mutex
	rv      int
	objects map[string]count // guarded by mu; by namespace/name
	log     []countEvent     // guarded by mu; every change, in order
	changed chan struct{}    // guarded by mu; closed on a change
}

const (
	countsGroup   = "counts.test.nodeproxy.io"
	countsVersion = "v1alpha1"
)

type count struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Value      int               `json:"value"`
}

type countEvent struct {
	typ watch.EventType
	obj count
}

// startCounts serves counts on a free port and registers it with
// kube-apiserver's aggregator.
func startCounts(t testing.TB, initial ...string) *countsServer {
	t.Helper()
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	s := &countsServer{port: ports[0], objects: map[string]count{}, changed: make(chan struct{})}
	for _, name := range initial {
		s.Increment(ns, name)
	}
	dir, err := os.MkdirTemp("", "counts-")
	if err != nil {
		t.Fatal(err)
	}
	// The aggregator checks the name of the Service it dials, which
	// RegisterAPIService names <service>-local.
	serving, err := cp.ServingCA.ServingCert(dir, "counts", "counts-local.default.svc")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	frontProxy := x509.NewCertPool()
	frontProxy.AddCert(cp.FrontProxyCA.Cert)
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{pair}, ClientCAs: frontProxy, ClientAuth: tls.RequireAndVerifyClientCert,
	}}
	go srv.ServeTLS(ln, "", "") //nolint:errcheck // ends with the test binary
	apiservice := filepath.Join(dir, "apiservice.yaml")
	ca, err := os.ReadFile(cp.ServingCA.CertPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(apiservice, []byte(fmt.Sprintf(countsAPIService, base64.StdEncoding.EncodeToString(ca))), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cp.RegisterAPIServiceWithoutOpenAPI(context.Background(), apiservice, s.port); err != nil {
		out, _ := exec.Command("kubectl", "--kubeconfig", testserver.AdminKubeconfig(t, cp, cp.URL), "get", "apiservice", "v1alpha1.counts.test.nodeproxy.io", "-o", "yaml").CombinedOutput()
		t.Fatalf("%v\n%s", err, out)
	}
	return s
}

const countsAPIService = `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.counts.test.nodeproxy.io}
spec:
  group: counts.test.nodeproxy.io
  version: v1alpha1
  service: {namespace: default, name: counts, port: 443}
  caBundle: "%s"
  groupPriorityMinimum: 1000
  versionPriority: 100
`

// Increment adds one to namespace/name (ADDED at 1) and returns its new
// resourceVersion.
func (s *countsServer) Increment(namespace, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	key := namespace + "/" + name
	c, ok := s.objects[key]
	typ := watch.Modified
	if !ok {
		typ = watch.Added
		c = count{APIVersion: countsGroup + "/" + countsVersion, Kind: "Count", Metadata: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	}
	c.Value++
	c.Metadata.ResourceVersion = strconv.Itoa(s.rv)
	s.objects[key] = c
	s.log = append(s.log, countEvent{typ, c})
	close(s.changed)
	s.changed = make(chan struct{})
	return c.Metadata.ResourceVersion
}

func (s *countsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != controlplane.FrontProxyClientName {
		http.Error(w, "only kube-apiserver's front proxy", http.StatusUnauthorized)
		return
	}
	prefix := "/apis/" + countsGroup + "/" + countsVersion
	path := strings.TrimSuffix(r.URL.Path, "/")
	var namespace string
	switch {
	case path == prefix:
		writeJSON(w, metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: countsGroup + "/" + countsVersion,
			APIResources: []metav1.APIResource{{Name: "counts", SingularName: "count", Namespaced: true, Kind: "Count", Verbs: []string{"list", "watch"}}},
		})
		return
	case path == prefix+"/counts":
	case strings.HasPrefix(path, prefix+"/namespaces/") && strings.HasSuffix(path, "/counts"):
		namespace = strings.TrimSuffix(strings.TrimPrefix(path, prefix+"/namespaces/"), "/counts")
	default:
		http.NotFound(w, r)
		return
	}
	if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
		s.watch(w, r, namespace)
		return
	}
	s.mu.Lock()
	list := struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   metav1.ListMeta `json:"metadata"`
		Items      []count         `json:"items"`
	}{countsGroup + "/" + countsVersion, "CountList", metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)}, s.inLocked(namespace)}
	s.mu.Unlock()
	writeJSON(w, list)
}

// inLocked is every count of namespace ("" for all), by key order.
func (s *countsServer) inLocked(namespace string) []count {
	keys := make([]string, 0, len(s.objects))
	for k, c := range s.objects {
		if namespace == "" || c.Metadata.Namespace == namespace {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make([]count, len(keys))
	for i, k := range keys {
		out[i] = s.objects[k]
	}
	return out
}

// watch streams a watch as kube-apiserver's does: from resourceVersion
// "" or "0" the current state as ADDED first, from a version every change
// after it; a bookmark after that start when asked for.
func (s *countsServer) watch(w http.ResponseWriter, r *http.Request, namespace string) {
	q := r.URL.Query()
	s.mu.Lock()
	var start []countEvent
	pos := len(s.log)
	rv := q.Get("resourceVersion")
	if rv == "" || rv == "0" {
		for _, c := range s.inLocked(namespace) {
			start = append(start, countEvent{watch.Added, c})
		}
	} else {
		n, err := strconv.Atoi(rv)
		if err != nil || n < 0 || n > len(s.log) {
			s.mu.Unlock()
			http.Error(w, "bad resourceVersion", http.StatusBadRequest)
			return
		}
		pos = n // the log's versions are 1, 2, 3...
	}
	if q.Get("allowWatchBookmarks") == "true" {
		bookmark := count{APIVersion: countsGroup + "/" + countsVersion, Kind: "Count", Metadata: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(s.rv)}}
		if q.Get("sendInitialEvents") == "true" {
			bookmark.Metadata.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
		}
		start = append(start, countEvent{watch.Bookmark, bookmark})
	}
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	send := func(events []countEvent) bool {
		for _, e := range events {
			if namespace != "" && e.obj.Metadata.Namespace != namespace && e.typ != watch.Bookmark {
				continue
			}
			if enc.Encode(struct {
				Type   watch.EventType `json:"type"`
				Object count           `json:"object"`
			}{e.typ, e.obj}) != nil {
				return false
			}
		}
		w.(http.Flusher).Flush()
		return true
	}
	if !send(start) {
		return
	}
	for {
		s.mu.Lock()
		changes := s.log[pos:]
		pos = len(s.log)
		changed := s.changed
		s.mu.Unlock()
		if !send(changes) {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
