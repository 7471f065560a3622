// Package runtime is layer 2 of an agent runtime: Runtime.Exec, a
// retry loop around a session.
//
// Exec makes up to 3 attempts (sleeping 1.5 s, then 3 s), returns at once on
// a programming error (a recovered panic, errors.ErrUnsupported) and on a
// permanent one ("failed permanently"), and otherwise retries whatever the
// session could not fix. Its error, *[ExecError], lists every attempt as
// "<Type>: <message>" with the reason it stopped. Each Exec is a layer span
// (retrace.layer=runtime) whose children are the session's: a trace shows how
// many provider calls the two retry layers made between them.
//
// One layer should own retrying, or the worst case is the product of both
// layers' attempts: Config.SingleOwner makes Exec a single attempt and leaves
// retrying to the session.
package runtime
