package retracemcp

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies"
)

// A server's error type reaches error.type only when it is a short
// identifier with nothing secret-shaped in it, the rule the core applies to
// a provider's code: on the server, ToolError writes nothing else on the
// wire; on the client, a type that breaks it reads as tool_error.
func TestServerTypeIsTheCoresRule(t *testing.T) {
	for in, want := range map[string]string{
		"rate_limit_error":             "rate_limit_error",
		"-32602":                       "-32602",
		"context.Canceled":             "context.Canceled",
		"ns:code-1":                    "ns:code-1",
		"_OTHER":                       "_OTHER",
		strings.Repeat("x", 64):        strings.Repeat("x", 64),
		"":                             "",
		strings.Repeat("x", 65):        "",
		"has spaces":                   "",
		"a/b":                          "",
		"key=value":                    "",
		"ünïcode":                      "",
		"sk-proj-abcdefghijklmnop0123": "",
		"invalid key: Bearer abcdefghijklmnopqrstuvwxyz": "",
		"ghp_abcdefghijklmnopqrstuvwxyz0123456789":       "",
	} {
		assert.Equal(t, want, safeType(in), "%q", in)
	}

	const unsafe = "sk-proj-abcdefghijklmnop0123"
	res := ToolError(&policies.Error{Class: policies.Transient, Type: unsafe})
	w, ok := res.Meta[MetaKeyError].(wireClass)
	require.True(t, ok)
	assert.Equal(t, "transient", w.Class)
	assert.Empty(t, w.Type, "an unsafe type is not sent")

	cl, ok := metaClass(mcp.Meta{MetaKeyError: map[string]any{"class": "transient", "type": unsafe}})
	require.True(t, ok)
	assert.Equal(t, policies.Transient, cl.Class)
	assert.Equal(t, "tool_error", cl.Type, "an unsafe type received is not written")
	cl, ok = metaClass(mcp.Meta{MetaKeyError: map[string]any{"class": "transient", "type": "rate_limit_error"}})
	require.True(t, ok)
	assert.Equal(t, "rate_limit_error", cl.Type)
}
