package retracegenkit

import (
	"context"
	"sync"

	"github.com/firebase/genkit/go/core/api"

	"github.com/retrace-go/retrace/policies/state"
)

// pluginName is the name the [Plugin] is registered under.
const pluginName = "retrace"

// Plugin keeps what retrace's middleware must remember between Generate
// calls in the genkit instance itself: each tool's circuit breaker. Register
// it once, with genkit.Init:
//
//	g := genkit.Init(ctx, genkit.WithPlugins(oai, &retracegenkit.Plugin{}))
//
// Every [Middleware] then used on g, however often it is made, keeps its
// tools' breakers there (a state.Memory, as the workers of a fleet
// share one): one breaker per tool name for the whole instance, opened by
// the failures of all of them and probed once for all of them. Give the
// middleware made for one instance the same Tool settings. A
// Tool.Breaker.State set in a Middleware's Config keeps that Middleware's
// breakers instead.
//
// Genkit calls a middleware's New on the value given to ai.WithUse, once per
// Generate, with the context of the call: the genkit package's Generate
// functions (genkit.Generate, GenerateText, GenerateData, GenerateStream)
// put the instance there (genkit.FromContext), which is how a Middleware
// finds the Plugin. A call made without them (ai.Generate on the registry,
// a prompt's Execute) does not say which instance runs it: its Middleware
// keeps the breakers itself, and must be made once and shared for them to
// last. The zero value is ready to use; it is safe for concurrent use.
type Plugin struct {
	once sync.Once
	mem  *state.Memory
}

var _ api.Plugin = (*Plugin)(nil)

// Name implements api.Plugin.
func (p *Plugin) Name() string { return pluginName }

// Init implements api.Plugin; the plugin defines no actions.
func (p *Plugin) Init(context.Context) []api.Action {
	p.state()
	return nil
}

// state is where the breakers keep their state.
func (p *Plugin) state() *state.Memory {
	p.once.Do(func() { p.mem = state.NewMemory() })
	return p.mem
}
