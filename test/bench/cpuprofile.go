package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"k8s.io/client-go/rest"
)

// profileChunk is the longest CPU profile asked of kube-apiserver at
// once: its /debug/pprof/profile is not a long-running request, so
// --request-timeout (60 s by default) ends a longer one with a 504. A
// span is profiled as consecutive chunks, whose samples add up.
const profileChunk = 30 * time.Second

// profileAPIServer takes kube-apiserver's CPU profile for d from now, as
// consecutive chunks of at most profileChunk, and returns them merged and
// raw (each gzipped profile.proto, as /debug/pprof/profile sends it).
// The profiler samples CPU time (100 samples a second of it, per thread),
// so what another process on the machine takes from kube-apiserver does
// not show as kube-apiserver's work; what it makes kube-apiserver do more
// of (spin, wait in the scheduler, miss caches) does.
func profileAPIServer(ctx context.Context, client rest.Interface, d time.Duration) (*profile.Profile, [][]byte, error) {
	var parts []*profile.Profile
	var raw [][]byte
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		secs := min(int((left+time.Second/2)/time.Second), int(profileChunk/time.Second))
		if secs < 1 {
			break
		}
		b, err := client.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(secs)).DoRaw(ctx)
		if err != nil {
			return nil, raw, fmt.Errorf("kube-apiserver's CPU profile: %w", err)
		}
		p, err := profile.Parse(bytes.NewReader(b))
		if err != nil {
			return nil, raw, fmt.Errorf("parse kube-apiserver's CPU profile: %w", err)
		}
		parts, raw = append(parts, p), append(raw, b)
	}
	if len(parts) == 0 {
		return nil, nil, fmt.Errorf("profile kube-apiserver for %s: too short to profile", d)
	}
	p, err := profile.Merge(parts)
	if err != nil {
		return nil, raw, fmt.Errorf("merge kube-apiserver's CPU profiles: %w", err)
	}
	return p, raw, nil
}

// writeProfiles writes the raw chunks of a profile as dir/name.N.pprof,
// for `go tool pprof`, which merges the files it is given.
func writeProfiles(dir, name string, raw [][]byte) error {
	for i, b := range raw {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.%d.pprof", name, i)), b, 0o644); err != nil {
			return fmt.Errorf("write kube-apiserver's CPU profile: %w", err)
		}
	}
	return nil
}

// cpuPart is a part of a process's CPU profile: the samples with any
// function of the part on their stack. Functions match by prefix of
// their full name.
type cpuPart struct {
	name      string
	functions []string
}

// watchDelivery is what kube-apiserver does for its watchers, not for
// the writes: the cacher handing each event to every watch (filtering it
// by the watch's selectors), each watch's goroutine converting it and
// the watch handler encoding and writing it. Its HTTP/2 connections'
// own goroutines, which frame and encrypt every response's bytes and run
// each connection's loop, watches' and other responses' alike, are a
// part of their own (httpServing); in a churn round most of their bytes
// are watch events, and the writes' responses are the same in both
// kinds of round.
var watchDelivery = cpuPart{"watch delivery", []string{
	"k8s.io/apiserver/pkg/storage/cacher.(*Cacher).dispatchEvent",
	"k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher).",
	"k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer).",
}}

// httpServing is the HTTP/2 server's own goroutines: each connection's
// loop, its frame reader and the writer that frames and encrypts.
var httpServing = cpuPart{"HTTP/2 connections (framing, TLS, each connection's loop)", []string{
	"golang.org/x/net/http2.(*serverConn).writeFrameAsync",
	"golang.org/x/net/http2.(*serverConn).serve",
	"golang.org/x/net/http2.(*serverConn).readFrames",
}}

// writesPart is the storage side of every create, update, patch and
// delete: the same in both kinds of churn round.
var writesPart = cpuPart{"writes (create, update, patch, delete: storage and etcd)", []string{
	"k8s.io/apiserver/pkg/endpoints/handlers/finisher.finishRequest",
}}

// apiCPUParts are the parts of kube-apiserver's CPU profile the bench
// names, the first in this order that matches a sample taking it, the
// rest left as "other". They were read from the profiles of the proxies
// scenario's churn rounds (docs/benchmarks.md, "Where kube-apiserver's
// extra CPU in a watched round goes"): watch delivery, and the same writes'
// work, which the two kinds of round share, as a control.
var apiCPUParts = []cpuPart{
	watchDelivery,
	httpServing,
	writesPart,
	{"other requests' filters and handlers (authentication, authorization, priority and fairness)", []string{
		"k8s.io/apiserver/pkg/server/filters.(*timeoutHandler).ServeHTTP",
		"golang.org/x/net/http2.(*serverConn).runHandler",
	}},
	{"the watch cache's intake from etcd", []string{
		"k8s.io/apiserver/pkg/storage/cacher.(*watchCache).",
		"k8s.io/apiserver/pkg/storage/etcd3.(*watchChan).",
	}},
	{"the etcd client (gRPC)", []string{"google.golang.org/grpc", "go.etcd.io/etcd/client/"}},
	{"garbage collection", []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge"}},
}

// cpuByPart sums p's CPU samples by parts, the first part that matches a
// sample's stack taking it; samples no part matches are under "other",
// and "total" is every sample.
func cpuByPart(p *profile.Profile, parts []cpuPart) map[string]time.Duration {
	out := map[string]time.Duration{}
	vi := cpuValueIndex(p)
	if vi < 0 {
		return out
	}
	for _, s := range p.Sample {
		d := time.Duration(s.Value[vi])
		out["total"] += d
		out[partOf(s, parts)] += d
	}
	return out
}

// cpuValueIndex is the index of the sample value that is CPU time in
// nanoseconds, or -1.
func cpuValueIndex(p *profile.Profile) int {
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			return i
		}
	}
	return -1
}

func partOf(s *profile.Sample, parts []cpuPart) string {
	for _, part := range parts {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				for _, prefix := range part.functions {
					if strings.HasPrefix(line.Function.Name, prefix) {
						return part.name
					}
				}
			}
		}
	}
	return "other"
}
