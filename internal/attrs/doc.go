// Package attrs reads the registry of the attribute keys and span events
// retrace writes from the source of package telemetry, where each is
// declared once:
//
//	Layer = attribute.Key("retrace.layer") // layer span: runtime, session, …
//	// EventCompacted is added when a session compacts its history.
//	EventCompacted = "retrace.session.compacted"
//
// It parses the files rather than importing the package so that the
// comments, which say where each key is set and what it means, come with
// the names: the README's attribute table is generated from them
// (internal/cmd/attrtable), and the demo's tests check every key a trace
// carries against them.
//
//	reg, err := attrs.Load("telemetry")
//	k, ok := reg.Key("retrace.outcome")
package attrs
