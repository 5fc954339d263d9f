package hub_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// postBulkGet sends one bulk get of op to srv with client and returns
// the status code and, on 201, the first result's raw list, else the
// Status the hub refused it with.
func postBulkGet(t testing.TB, srv *testserver.Server, client *http.Client, op v1alpha1.GetOperation) (int, []byte, *metav1.Status) {
	t.Helper()
	body, err := json.Marshal(&v1alpha1.BulkGetOperation{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BulkGetOperation"},
		Spec:     v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{op}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post(srv.URL+"/apis/bulk.k8s.io/v1alpha1/bulkgetoperations", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		var status metav1.Status
		if err := json.Unmarshal(raw, &status); err != nil {
			t.Fatalf("%d without a Status: %s", resp.StatusCode, raw)
		}
		return resp.StatusCode, nil, &status
	}
	var out v1alpha1.BulkGetOperation
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Status.Results) != 1 {
		t.Fatalf("answer %s: %v", raw, err)
	}
	return resp.StatusCode, out.Status.Results[0].Raw, nil
}
