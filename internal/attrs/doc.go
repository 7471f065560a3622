// Package attrs reads the registry of the attribute keys and span events
// retrace writes from the source of package telemetry, and of an adapter
// that writes keys of its own (contrib/mcp declares the MCP conventions'
// keys, which only it writes), where each is declared once:
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
//	core, err := attrs.Load("telemetry")
//	mcp, err := attrs.Load("contrib/mcp")
//	reg, err := attrs.Merge(core, mcp)
//	k, ok := reg.Key("retrace.outcome")
package attrs
