package policies

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedactSecrets(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		// Schemes.
		{"bearer", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "Authorization: Bearer [REDACTED]"},
		{"bearer with padding", "bearer\t\tdXNlcjpwYXNzd29yZA== next", "bearer [REDACTED] next"},
		{"basic", `header "Basic dXNlcjpwYXNz"`, `header "Basic [REDACTED]"`},
		{"bearer underscore", "Bearer abc_def_ghi_jkl", "Bearer [REDACTED]"},
		{"bearer twice", "Bearer Bearer abcdefgh123", "Bearer Bearer [REDACTED]"},
		{"authorization json", `{"Authorization": "Bearer tok-123456"}`, `{"Authorization": "Bearer [REDACTED]"}`},

		// Provider prefixes after a word boundary.
		{"openai", "Incorrect API key provided: sk-proj-AbCdEf1234567890", "Incorrect API key provided: sk-[REDACTED]"},
		{"upper case", "x SK-ABCDEF123456", "x SK-[REDACTED]"},
		{"masked", "key sk-proj-****abcd rejected", "key sk-[REDACTED] rejected"},
		{"anthropic", "anthropic key sk-ant-api03-abcdefghijklmnop rejected", "anthropic key sk-ant-[REDACTED] rejected"},
		{"xai", "xai-AbCdEf0123", "xai-[REDACTED]"},
		{"groq", "gsk_AbCdEf0123", "gsk_[REDACTED]"},
		{"github", "ghp_16C7e42F292c6912E7710c838347Ae178B4a and gho_abcdef", "ghp_[REDACTED] and gho_[REDACTED]"},
		{"github pat", "github_pat_11ABCDEFG0123456789_abcdef", "github_pat_[REDACTED]"},
		{"slack", "xoxb-1234-5678-abcdef", "xoxb-[REDACTED]"},
		{"restricted and public", "rk-live12345 pk-test12345", "rk-[REDACTED] pk-[REDACTED]"},
		{"google", "key=AIzaSyA1234567890abcdefghijklmnopq", "key=[REDACTED]"},
		{"google in text", "use AIzaSyA1234567890abcdefghijklmnopq now", "use [REDACTED] now"},

		// Provider prefixes glued to a word character.
		{"glued underscore", "invalid_key_sk-proj-abcdef123456", "invalid_key_sk-[REDACTED]"},
		{"glued digit", "0sk-proj-abcdef123456", "0sk-[REDACTED]"},
		{"glued letter", "keysk-proj-abcdef123456 x", "keysk-[REDACTED] x"},
		{"glued github", "the tokenghp_abcdef1234567890", "the tokenghp_[REDACTED]"},
		{"glued, long enough to be opaque", "tokenghp_16C7e42F292c6912E7710c838347Ae178B4a", "[REDACTED]"},

		// Assignments.
		{"json", `{"api_key": "abcd1234efgh"}`, `{"api_key": "[REDACTED]"}`},
		{"yaml", "password: hunter22", "password: [REDACTED]"},
		{"env", "OPENAI_API_KEY=abcd1234 DB_PASSWORD=pw1234", "OPENAI_API_KEY=[REDACTED] DB_PASSWORD=[REDACTED]"},
		{"aws", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY=[REDACTED]"},
		{"header", "x-api-key: abcd-1234", "x-api-key: [REDACTED]"},
		{"quoted", `secret='s3cr3t-value', next`, `secret='[REDACTED]', next`},
		{"access token", "access-token = 9f8e7d6c", "access-token = [REDACTED]"},
		{"auth token", "AuthToken:abcd", "AuthToken:[REDACTED]"},
		{"client secret", `{"client_secret":"abcd1234"}`, `{"client_secret":"[REDACTED]"}`},

		// URL query and fragment parameters.
		{"query token", "https://x/search?q=go&token=s3cr3tvalue&page=2", "https://x/search?q=go&token=[REDACTED]&page=2"},
		{"query key", "https://maps.example.com/api?key=abc&v=3", "https://maps.example.com/api?key=[REDACTED]&v=3"},
		{"query names", "https://h/p?api_key=a1&access_token=a2&sig=a3&signature=a4&code=a5&client_secret=a6&password=a7&x=1",
			"https://h/p?api_key=[REDACTED]&access_token=[REDACTED]&sig=[REDACTED]&signature=[REDACTED]&code=[REDACTED]&client_secret=[REDACTED]&password=[REDACTED]&x=1"},
		{"presigned", "https://b.s3.amazonaws.com/o?X-Amz-Date=20240101&X-Amz-Signature=ab12cd&X-Amz-Security-Token=zz9",
			"https://b.s3.amazonaws.com/o?X-Amz-Date=20240101&X-Amz-Signature=[REDACTED]&X-Amz-Security-Token=[REDACTED]"},
		{"fragment", "https://app/cb#access_token=abc&state=s", "https://app/cb#access_token=[REDACTED]&state=s"},

		// URL userinfo.
		{"password", "GET https://user:pa55word@host/path failed", "GET https://user:[REDACTED]@host/path failed"},
		{"password with @", "postgres://app:p@ss:w0rd@db:5432/x", "postgres://app:[REDACTED]@db:5432/x"},
		{"token user", "https://ghp16C7e42F292c6912E7710c838347A@github.com/o/r.git", "https://[REDACTED]@github.com/o/r.git"},
		{"token password", "https://x-access-token:ghs_abcdef123456@github.com/o/r", "https://x-access-token:[REDACTED]@github.com/o/r"},
		{"names in the user name", "https://u@x-api-key:abcd@host/p", "https://u@x-api-key:[REDACTED]@host/p"},
		{"no rule takes the @", "https://token=abc:@host/p", "https://token=[REDACTED]@host/p"},

		// Opaque tokens without a name.
		{"jwt", "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U expired",
			"token [REDACTED] expired"},
		{"azure hex", "Access denied due to invalid subscription key 0123456789abcdef0123456789abcdef.", "Access denied due to invalid subscription key [REDACTED]."},
		{"github classic", "oauth 6f1ed002ab5595859014ebf0951522d9e3d0ffa2", "oauth [REDACTED]"},
		{"base64 padding", "k=QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3==;", "k=[REDACTED];"},
		{"in a url path", "https://h.example.com/v1/keys/0123456789abcdef0123456789abcdef/rotate", "https://h.example.com/v1/keys/[REDACTED]/rotate"},
		{"after a key", "sk-abcdef.eyJhbGciOiJIUzI1NiJ9eyJzdWIiOiIxMjM0NTY3ODkwIn0", "sk-[REDACTED][REDACTED]"},

		// A redacted token that was a name takes its value along.
		{"bearer before a name", "Bearer api_key: v4abcdef", "Bearer [REDACTED]: [REDACTED]"},
		{"a name as a value", "password: OPENAI_API_KEY: v4abcdef", "password: [REDACTED] [REDACTED]"},
		{"a quoted name as a value", `token: apikey": "v4abcdef"`, `token: [REDACTED]": "[REDACTED]"`},
		{"a scheme after a name", "authorization: x-api-key: Bearer v4abcdef", "authorization: [REDACTED] Bearer [REDACTED]"},
		{"a url after a bearer", "Bearer postgres://app:pa55word@db/x", "Bearer [REDACTED]://app:[REDACTED]@db/x"},
		{"a name as a url scheme", "token://app:pa55word@db", "token://app:[REDACTED]@db"},
		{"a name in a bearer token", "Bearer password=hunter2#42", "Bearer [REDACTED]=[REDACTED]"},
		{"a url as a value", "DATABASE_PASSWORD=postgres://app:p,w;1@db/x more", "DATABASE_PASSWORD=[REDACTED] more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Redact(tt.in)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, got, Redact(got), "a second Redact changes nothing")
		})
	}
}

func TestRedactKeepsOrdinaryText(t *testing.T) {
	for _, s := range []string{
		"",
		"503 overloaded",
		"nothing secret here: 503 overloaded",
		"the key was rejected",
		"Rate limit reached for requests",
		"rate limit",
		"tokens used: 1234",
		"max_tokens: 4096, prompt_tokens=12",
		"token: abc", // too short to be a secret
		"401 invalid_api_key: Incorrect API key provided",
		"invalid_token: The access token expired",
		"public-key: ssh-ed25519",
		"model gpt-4o",
		"error code: 429, status_code=500",
		"sk-",
		"sk- alone, pk-12 and sk-abc",
		"connection reset by peer",
		"Basic plan",
		"bearer token required",
		"https://api.openai.com/v1/chat/completions",
		"see https://platform.openai.com/account/api-keys.",
		"https://example.com/search?q=go&page=2#top",
		"ssh://git@github.com/org/repo.git",
		"https://user@example.com/",
		"/usr/local/lib/python3.11/site-packages/openai/_base_client.py:1042",
		"anthropic.claude-3-5-sonnet-20241022-v2:0",
		"request 123e4567-e89b-12d3-a456-426614174000 failed",
		"request req_8f9e7d6c5b4a39281706f5e4d3c2b1a0 failed",
		"completion chatcmpl-AbC123dEf456GhI789jKl012MnO345pQr",
		"task-management-system-overview disk-space-exhausted-on-node-12",
		"risk-assessment-v2-pipeline work-in-progress-items-2024",
		"1234567890123456789012345678901234567890",
		"invalid_request_error_for_project_number_12345",
		"com.example.service.impl.UserServiceImpl.handleRequest(UserServiceImpl.java:42)",
	} {
		assert.Equal(t, s, Redact(s))
	}
}

func TestRedactAllocatesNothingWithoutSecrets(t *testing.T) {
	msg := "503 server_error: The server had an error while processing your request. Sorry about that!"
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = Redact(msg) }))
}

// TestRedactRepeatedNearMisses checks short forms of the inputs that
// BenchmarkRedact times at a megabyte: text that makes rules start over and
// over without a secret, or with many short ones.
func TestRedactRepeatedNearMisses(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{strings.Repeat("ask-", 3) + "x", strings.Repeat("ask-", 3) + "x"},
		{strings.Repeat("sk-abcdef.", 3), strings.Repeat("sk-[REDACTED].", 3)},
		{strings.Repeat("a://", 3), strings.Repeat("a://", 3)},
		{strings.Repeat("?token", 3), strings.Repeat("?token", 3)},
		{strings.Repeat("Bearer ", 3) + "x", strings.Repeat("Bearer ", 3) + "x"},
		{"token" + strings.Repeat(" ", 10) + "x", "token" + strings.Repeat(" ", 10) + "x"},
	} {
		assert.Equal(t, tt.want, Redact(tt.in))
	}
}

func TestRedactKnownValues(t *testing.T) {
	known := []string{"correct-horse-battery", "short", "correct-horse-battery", "battery-staple-42"}
	for _, tt := range []struct{ in, want string }{
		{"login with correct-horse-battery failed", "login with [REDACTED] failed"},
		{"a correct-horse-batterycorrect-horse-battery b", "a [REDACTED] b"},
		{"overlap correct-horse-battery-staple-42 end", "overlap [REDACTED] end"},
		{"short is kept", "short is kept"},
		{"and patterns: sk-proj-AbCdEf1234567890", "and patterns: sk-[REDACTED]"},
		{"glued:xxcorrect-horse-batteryyy", "glued:xx[REDACTED]yy"},
		// Known values go first: a pattern that took part of one would leave the rest.
		{"password=Tr0ub4dor&3horse", "password=[REDACTED]"},
	} {
		assert.Equal(t, tt.want, Redact(tt.in, append(known, "Tr0ub4dor&3horse")...), "%q", tt.in)
	}
	assert.Equal(t, Redact("pw sk-proj-AbCdEf1234567890"), Redact("pw sk-proj-AbCdEf1234567890", nil...))
}
