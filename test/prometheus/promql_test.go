package prometheus

import (
	"reflect"
	"testing"
)

func TestSelectorsFindsTheSeriesAnExpressionReads(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`max(aggregator_unavailable_apiservice{name="v1alpha1.bulk.k8s.io"}) > 0`, []string{`aggregator_unavailable_apiservice{name="v1alpha1.bulk.k8s.io"}`}},
		{`absent(up{job="nodeproxy"} == 1)`, []string{`up{job="nodeproxy"}`}},
		{"histogram_quantile(0.99, sum by (le, pod) (rate(x_bucket[5m]))) > 1e-3", []string{"x_bucket"}},
		{`sum without (instance) (a_total{r=~"x|y}"}) / ignoring(r) group_left(pod) b offset 5m`, []string{`a_total{r=~"x|y}"}`, "b"}},
		{`sum(rate(a[5m])) by (pod) and on (pod) b > bool 2`, []string{"a", "b"}},
		{`{__name__="c", job="j"}`, []string{`{__name__="c", job="j"}`}},
		{`label_replace(d, "dst", "$1", "src", "(.*)")`, []string{"d"}},
		{"max_over_time(e[10m:1m]) > .5", []string{"e"}},
	} {
		if got := Selectors(tc.expr); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Selectors(%s) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
