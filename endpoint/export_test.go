package endpoint

// ReadyProbeInterval is readyProbeInterval, for tests that bound the
// probes /readyz makes.
const ReadyProbeInterval = readyProbeInterval
