//go:build !race

package soak

// soakCalls is the soak's number of logical calls.
const soakCalls = 10_000
