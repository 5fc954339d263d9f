package passthrough

import (
	"time"

	"k8s.io/component-base/metrics/testutil"
)

// SetWatchTimeout makes c ask kube-apiserver to end each upstream watch
// after d, so that a test sees re-opens without waiting minutes.
func SetWatchTimeout(c *Client, d time.Duration) {
	c.watchTimeout = func() time.Duration { return d }
}

// Reopened is how many upstream watches were re-opened after ending
// without an error, in this process.
func Reopened() float64 {
	RegisterMetrics()
	v, _ := testutil.GetCounterMetricValue(reopens.WithLabelValues("ok"))
	return v
}
