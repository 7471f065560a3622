// Package session is layer 1 of an agent runtime: a conversation with a
// model, its message history, and its automatic retry.
//
// [Session.Run] appends the user's prompt, makes a model call through the
// session layer (retrace.layer=session) and its model layer ("chat {model}"),
// and returns the assistant's message. Every failure of a turn becomes an
// assistant [Message] with StopReason "error" and ErrorMessage
// "<Type>: <message>"; the session retries it in this order (context
// overflow: never, it compacts instead; an empty message, the mark of a
// dropped stream: always; the transient pattern: yes; anything else: no),
// after 2 s, 4 s and 8 s, popping the failed message from the history
// before each retry.
//
// [OpenAI] is a streaming [Provider] for any OpenAI-compatible endpoint,
// built on github.com/openai/openai-go/v3 with the SDK's own retries off.
// [Anthropic] is one for Anthropic's Messages API, built on
// github.com/anthropics/anthropic-sdk-go/v2, its retries off too; its errors
// are classified by Anthropic's error types (overloaded_error transient,
// billing_error fatal, "prompt is too long" a context overflow, …).
//
//	s, err := session.New(session.Config{Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: url, APIKey: key}), Model: "gpt-4o-mini"})
//	reply, err := s.Run(ctx, "Summarise the incident")
package session
