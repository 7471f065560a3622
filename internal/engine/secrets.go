package engine

import "context"

// MinSecretLen is the shortest value redacted by exact value: a shorter one
// ("test", "1234") would wreck ordinary text, and is no credential worth the
// name.
const MinSecretLen = 8

type secretsKey struct{}

// WithSecrets returns a context whose text, wherever retrace writes it,
// has values (and those of the contexts above) redacted by exact value.
func WithSecrets(ctx context.Context, values ...string) context.Context {
	prev := SecretsFrom(ctx)
	all := make([]string, 0, len(prev)+len(values))
	all = append(all, prev...)
	for _, v := range values {
		if len(v) >= MinSecretLen && !contains(all, v) {
			all = append(all, v)
		}
	}
	if len(all) == len(prev) {
		return ctx
	}
	return context.WithValue(ctx, secretsKey{}, all)
}

// SecretsFrom returns the context's known secrets.
func SecretsFrom(ctx context.Context) []string {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(secretsKey{}).([]string)
	return s
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
