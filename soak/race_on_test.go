//go:build race

package soak

// soakCalls is the soak's number of logical calls under the race detector,
// which makes everything about ten times slower.
const soakCalls = 1_000
