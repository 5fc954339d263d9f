package endpoint

// ReadyProbeInterval is readyProbeInterval, for tests that bound the
// probes /readyz makes.
const ReadyProbeInterval = readyProbeInterval

// ScrapeReviewRate and ScrapeReviewBurst are the review rate of new
// scraper tokens, for tests that bound the reviews a flood makes.
const (
	ScrapeReviewRate  = scrapeReviewRate
	ScrapeReviewBurst = scrapeReviewBurst
)
