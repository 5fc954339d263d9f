package watch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

// versionsFunc is a bulk.LatestVersions.
type versionsFunc func() (uint64, error)

func (f versionsFunc) LatestVersion(context.Context, schema.GroupVersionResource) (uint64, error) {
	return f()
}

// secretAt is secret ns/name at resourceVersion rv.
func secretAt(ns, name string, rv uint64) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: strconv.FormatUint(rv, 10)}}
}

// versionWaitCount is nodeproxy_bulk_version_waits_total of secrets for
// request and result.
func versionWaitCount(t *testing.T, request, result string) float64 {
	t.Helper()
	return bulktest.CounterValue(t, "nodeproxy_bulk_version_waits_total", map[string]string{"resource": "secrets", "request": request, "result": result})
}

// TestResumeAheadOfTheCache: a channel resumed from a resourceVersion X
// the cache has not reached joins once the cache reaches X, or at once
// when kube-apiserver says it has reached X (the cache is quiet, not
// behind: the client has every change up to X), and never hears of a
// change at or before X; when neither the cache nor kube-apiserver
// reaches X it is refused with 504 "Too large resource version" after the
// bound, whether kube-apiserver said so or could not be asked. Before,
// such a channel opened at once and silently skipped every change up to
// X.
func TestResumeAheadOfTheCache(t *testing.T) {
	for _, tc := range []struct {
		name   string
		latest func(x uint64) bulk.LatestVersions
		// catchUp: the cache takes in a change at X while the channel
		// waits.
		catchUp bool
		refused bool
		result  string // of nodeproxy_bulk_version_waits_total
	}{
		{name: "kube-apiserver has reached X: joins ahead of the cache", result: "vouched",
			latest: func(x uint64) bulk.LatestVersions { return versionsFunc(func() (uint64, error) { return x + 10, nil }) }},
		{name: "the cache reaches X within the bound", catchUp: true, result: "caught_up",
			latest: func(x uint64) bulk.LatestVersions { return versionsFunc(func() (uint64, error) { return x - 1, nil }) }},
		{name: "X from the future: 504", refused: true, result: "too_large",
			latest: func(x uint64) bulk.LatestVersions { return versionsFunc(func() (uint64, error) { return x - 1, nil }) }},
		{name: "kube-apiserver unreachable: 504, counted", refused: true, result: "unchecked",
			latest: func(uint64) bulk.LatestVersions {
				return versionsFunc(func() (uint64, error) { return 0, errors.New("connection refused") })
			}},
		{name: "nobody to ask: 504", refused: true, result: "unchecked",
			latest: func(uint64) bulk.LatestVersions { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := bulktest.SkipVersions(1000) // clear of other tests' versions
			x := base + 5
			f, w := watcherFixtureWith(t, tc.latest(x))
			f.Add(t, secretAt("a", "s", base))
			before := versionWaitCount(t, "resume", tc.result)
			if tc.catchUp {
				go func() {
					time.Sleep(2 * bulk.StoreLagAllowance)
					if err := f.Cache.Store(bulktest.GVR("secrets")).Update(secretAt("a", "other", x)); err != nil {
						t.Error(err)
					}
				}()
			}
			r := newRecorder()
			sel := bulktest.GetOp("secrets", "a", metav1.ListOptions{FieldSelector: "metadata.name=s", ResourceVersion: fmt.Sprint(x)})
			run, refused := w.Open(request.WithUser(context.Background(), bulktest.Admin), &sel, r)
			if got := versionWaitCount(t, "resume", tc.result) - before; got != 1 {
				t.Errorf("nodeproxy_bulk_version_waits_total{result=%q} grew by %v, want 1", tc.result, got)
			}
			if tc.refused {
				if refused == nil {
					t.Fatal("opened, want 504")
				}
				if refused.Code != http.StatusGatewayTimeout || refused.Reason != metav1.StatusReasonTimeout ||
					refused.Details == nil || len(refused.Details.Causes) != 1 || refused.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
					t.Fatalf("refused with %+v, want 504 Timeout with cause ResourceVersionTooLarge", refused)
				}
				return
			}
			if refused != nil {
				t.Fatalf("refused: %+v", refused)
			}
			run()
			f.Add(t, secretAt("a", "s", x))   // the client has this one
			f.Add(t, secretAt("a", "s", x+1)) // and not this one
			got := r.wait(t, 1)
			if got[0] != "MODIFIED s" || r.rvs[0] != fmt.Sprint(x+1) {
				t.Errorf("events %v at %v, want MODIFIED s at %d only", got, r.rvs, x+1)
			}
		})
	}
}

// TestNamedChannelResumesFromCurrentState: a channel naming one object,
// resumed from a version older than the change log reaches (a replica
// started after the client saw it), gets the object's current state as at
// most one event, then every later change once; any other channel gets
// ERROR 410 as before (then, every one did).
func TestNamedChannelResumesFromCurrentState(t *testing.T) {
	f, w := watcherFixture(t)
	for _, name := range []string{"same", "newer", "gone", "relabeled"} {
		f.Add(t, bulktest.Secret("a", name))
	}
	from := f.Cache.Store(bulktest.GVR("secrets")).Snapshot().RV
	newer := bulktest.Secret("a", "newer")
	f.Add(t, newer)
	if err := f.Cache.Store(bulktest.GVR("secrets")).Delete(bulktest.Secret("a", "gone")); err != nil {
		t.Fatal(err)
	}
	relabeled := bulktest.Secret("a", "relabeled")
	relabeled.Labels = map[string]string{"name": "moved"}
	f.Add(t, relabeled)
	for range 70 { // past the 64 changes the log holds
		f.Add(t, bulktest.Secret("b", "churn"))
	}
	time.Sleep(100 * time.Millisecond) // dispatched past from

	for _, tc := range []struct {
		name, fieldSelector, labelSelector string
		want                               string // the first event
		wantRV                             string // its resourceVersion; "" for the next change's
		identity                           bool   // at the store's version
	}{
		{name: "unchanged since: nothing, then the next change", fieldSelector: "metadata.name=same", want: "MODIFIED same"},
		{name: "changed since: MODIFIED with the current object", fieldSelector: "metadata.name=newer", want: "MODIFIED newer", wantRV: newer.ResourceVersion},
		{name: "deleted since: DELETED with its identity", fieldSelector: "metadata.name=gone", want: "DELETED gone", identity: true},
		{name: "never there: DELETED, which deletes nothing", fieldSelector: "metadata.name=never", want: "DELETED never", identity: true},
		{name: "out of the selection since: DELETED", fieldSelector: "metadata.name=relabeled", labelSelector: "name=relabeled", want: "DELETED relabeled", wantRV: relabeled.ResourceVersion},
		{name: "not naming one object: 410", want: "ERROR 410"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := open(t, w, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{
				FieldSelector: tc.fieldSelector, LabelSelector: tc.labelSelector, ResourceVersion: fmt.Sprint(from),
			}))
			expired := tc.want == "ERROR 410"
			switch {
			case tc.identity:
				tc.wantRV = fmt.Sprint(f.Cache.Store(bulktest.GVR("secrets")).Snapshot().RV)
			case tc.wantRV == "" && !expired:
				// Nothing is due: the first event is this change.
				s := bulktest.Secret("a", "same")
				tc.wantRV = s.ResourceVersion
				f.Add(t, s)
			}
			got := r.wait(t, 1)
			if got[0] != tc.want && !(expired && strings.HasPrefix(got[0], tc.want)) {
				t.Fatalf("events %v, want %s first", got, tc.want)
			}
			if !expired && r.rvs[0] != tc.wantRV {
				t.Errorf("%s at resourceVersion %s, want %s", got[0], r.rvs[0], tc.wantRV)
			}
		})
	}
}
