// Package redact removes secrets from the text retrace writes: span status
// and attributes, diagnoses, the errors it builds, the failure a model reads,
// checkpoints. Every sink calls it, so that what counts as a secret is
// decided in one place; policies.Redact, which users
// call, is this package's Text.
//
// The rule: the known values (the credentials of the call, registered with
// policies.WithSecrets or configured on a provider) are replaced by exact
// value first, then the secret patterns (keys, bearer tokens, secret
// assignments and query parameters, passwords in URLs, opaque tokens: one
// table of rules, tried in a single linear scan), and a cap, if any, cuts
// the result last. Known values go
// first because a pattern that took part of one would leave the rest, which
// the exact value no longer matches; the cut goes last because a cut first
// could halve a secret, and the half left would match neither.
//
// Text redacts a text and caps it; Value redacts an identifier whole;
// IsSecret tells whether Text would change a text without building one.
// Known and HasKnown are the same for the known values alone, for the
// fields whose patterns are redacted where they are written.
package redact
