package endpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/client-go/rest"
)

// ReadyProbeInterval is readyProbeInterval, for tests that bound the
// probes /readyz makes.
const ReadyProbeInterval = readyProbeInterval

// ScrapeReviewRate and ScrapeReviewBurst are the review rate of new
// scraper tokens, for tests that bound the reviews a flood makes.
const (
	ScrapeReviewRate  = scrapeReviewRate
	ScrapeReviewBurst = scrapeReviewBurst
)

// TokenCheck is tokenCheck, for the benchmark of what asking
// kube-apiserver about a client's token costs.
type TokenCheck = tokenCheck

// NewTokenCheck is newTokenCheck.
func NewTokenCheck(cfg *rest.Config) (*TokenCheck, error) { return newTokenCheck(cfg) }

// Refuses asks, as the endpoint does before a new read with token.
func (t *tokenCheck) Refuses(ctx context.Context, token string) (bool, error) {
	sum := sha256.Sum256([]byte(token))
	return t.refuses(ctx, clientKey{token: token, id: hex.EncodeToString(sum[:])})
}

// ViewInJSON makes e ask for its node's view in JSON, as an endpoint of
// the release before protobuf views asks; call it before Run.
func ViewInJSON(e *Endpoint) { e.view.inJSON = true }
