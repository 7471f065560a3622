package policies

import (
	"context"

	"github.com/retrace-go/retrace/internal/engine"
)

// WithSecrets returns a context under which retrace redacts values by exact
// value wherever it writes text: span status and attributes, diagnoses, the
// errors it builds, the tool failure the model reads, checkpoint files. Set
// it once, at the top of a task, with the credentials your tools use; the
// providers add their configured keys themselves. Values shorter than 8
// bytes are ignored (they would wreck ordinary text); secret patterns (keys,
// bearer tokens, secret query parameters, passwords in URLs) are redacted
// everywhere regardless.
func WithSecrets(ctx context.Context, values ...string) context.Context {
	return engine.WithSecrets(ctx, values...)
}
