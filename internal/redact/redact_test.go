package redact

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/retrace-go/retrace/internal/engine"
)

func TestTextSecrets(t *testing.T) {
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
			got := Text(tt.in, nil, 0)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, got, Text(got, nil, 0), "a second Text changes nothing")
			assert.Equal(t, got != tt.in, IsSecret(tt.in, nil))
			assert.False(t, IsSecret(got, nil), "what Text wrote is no secret")
		})
	}
}

func TestTextKeepsOrdinaryText(t *testing.T) {
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
		assert.Equal(t, s, Text(s, nil, 0))
		assert.False(t, IsSecret(s, nil), "%q", s)
	}
}

func TestTextAllocatesNothingWithoutSecrets(t *testing.T) {
	msg := "503 server_error: The server had an error while processing your request. Sorry about that!"
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = Text(msg, nil, 0) }))
}

// TestTextRepeatedNearMisses checks short forms of the inputs that
// BenchmarkRedact times at a megabyte: text that makes rules start over and
// over without a secret, or with many short ones.
func TestTextRepeatedNearMisses(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{strings.Repeat("ask-", 3) + "x", strings.Repeat("ask-", 3) + "x"},
		{strings.Repeat("sk-abcdef.", 3), strings.Repeat("sk-[REDACTED].", 3)},
		{strings.Repeat("a://", 3), strings.Repeat("a://", 3)},
		{strings.Repeat("?token", 3), strings.Repeat("?token", 3)},
		{strings.Repeat("Bearer ", 3) + "x", strings.Repeat("Bearer ", 3) + "x"},
		{"token" + strings.Repeat(" ", 10) + "x", "token" + strings.Repeat(" ", 10) + "x"},
		{strings.Repeat("Cookie:-", 3), strings.Repeat("Cookie:-", 3)},
		{strings.Repeat("credential -", 3), strings.Repeat("credential -", 3)},
		{"https://h/" + strings.Repeat("abcdefgh12345678/", 3), "https://h/" + strings.Repeat("[REDACTED]/", 3)},
	} {
		assert.Equal(t, tt.want, Text(tt.in, nil, 0))
		assert.Equal(t, tt.want != tt.in, IsSecret(tt.in, nil), "%q", tt.in)
	}
}

func TestTextKnownValues(t *testing.T) {
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
		assert.Equal(t, tt.want, Text(tt.in, append(known, "Tr0ub4dor&3horse"), 0), "%q", tt.in)
		assert.Equal(t, tt.want != tt.in, IsSecret(tt.in, append(known, "Tr0ub4dor&3horse")), "%q", tt.in)
	}
	assert.Equal(t, Text("pw sk-proj-AbCdEf1234567890", nil, 0), Text("pw sk-proj-AbCdEf1234567890", []string{}, 0))
}

// The secrets outside probes found past the patterns: query parameters of more
// names, cookie headers, a token after the word that names it, and a token
// of 16 in a URL's path.
func TestTextMoreShapes(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		// Query parameters named auth, pwd, session, credential, jwt.
		{"query auth", `Get "https://h/p?auth=s3cr3tvalue&x=1": dial tcp: connection refused`,
			`Get "https://h/p?auth=[REDACTED]&x=1": dial tcp: connection refused`},
		{"query more names", "https://h/p?pwd=a1&session=a2&credential=a3&jwt=a4&user_session=a5&x-auth=a6&credentials=a7&page=2",
			"https://h/p?pwd=[REDACTED]&session=[REDACTED]&credential=[REDACTED]&jwt=[REDACTED]&user_session=[REDACTED]&x-auth=[REDACTED]&credentials=[REDACTED]&page=2"},
		{"presigned credential", "https://b.s3.amazonaws.com/o?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20240101T000000Z",
			"https://b.s3.amazonaws.com/o?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=[REDACTED]&X-Amz-Date=20240101T000000Z"},

		// Cookie headers.
		{"cookie", "read tcp: connection reset; request had Cookie: session=abc123; theme=dark",
			"read tcp: connection reset; request had Cookie: session=[REDACTED]; theme=[REDACTED]"},
		{"cookie short value", "Cookie: sid=x1", "Cookie: sid=[REDACTED]"},
		{"set-cookie keeps its attributes", "Set-Cookie: session=Zq7xW2tenant; Path=/; HttpOnly; Secure",
			"Set-Cookie: session=[REDACTED]; Path=/; HttpOnly; Secure"},
		{"cookie in json", `{"headers": {"Cookie": "sid=abc; csrf=def", "Accept": "*/*"}}`,
			`{"headers": {"Cookie": "sid=[REDACTED]; csrf=[REDACTED]", "Accept": "*/*"}}`},
		{"cookie quoted value", `cookie: token="a b"; n=1`, `cookie: token="[REDACTED]"; n=[REDACTED]`},
		{"cookie base64 value", "Cookie: s=YWJj+ZGVm/Z2hp==; n=1", "Cookie: s=[REDACTED]; n=[REDACTED]"},
		{"lower case, no space", "cookie:sess=9f8e7d", "cookie:sess=[REDACTED]"},

		// A token after the word that names it.
		{"bearer credential", "invalid bearer credential tok_live_51HabcdEFGH123", "invalid bearer credential [REDACTED]"},
		{"token word", "token abcd1234 is not valid", "token [REDACTED] is not valid"},
		{"credential word", "Credential AKIAIOSFODNN7EXAMPLE rejected.", "Credential [REDACTED] rejected."},
		{"credentials word", "bad credentials 8f3a9c2e1b", "bad credentials [REDACTED]"},
		{"a full stop ends it", "invalid token tok_9f8e7d6c5b.", "invalid token [REDACTED]."},
		{"bearer token word", "bearer token ab12cd34ef", "bearer token [REDACTED]"},
		{"after a newline", "token\n\tabc123def", "token\n\t[REDACTED]"},

		// A redacted value that names what follows takes it along.
		{"a cookie header as a value", `ApikeY: "Cookie": "a=1; token=c6W"`, `ApikeY: "Cookie": "a=[REDACTED]; token=[REDACTED]"`},
		{"a cookie header and ':' as a value", "password: Set-Cookie: sid=x1; Path=/", "password: Set-Cookie: sid=[REDACTED]; Path=/"},
		{"a token word as a value", "secret: credential tok_live_51HabcdEFGH123", "secret: [REDACTED] [REDACTED]"},
		{"a name and '=' as a value", "password=secret='abcd1234' ok", "password=[REDACTED]'[REDACTED]' ok"},
		{"a cookie header as a value, its first cookie", "ApikeY: Cookie: theme=dark; s=c6W", "ApikeY: Cookie: theme=[REDACTED]; s=[REDACTED]"},
		{"a cookie header as an assignment's value", "Authorization: cookie:sid=c6&WWWWWWW 0", "Authorization: cookie:sid=[REDACTED] 0"},
		{"a padded value is no name", "password: dXNlcjpwYXNzd29yZA== next", "password: [REDACTED] next"},

		// A URL's path: a part of letters, digits, '-' and '_' with a run
		// of 16 letters and digits, both among them.
		{"path key", "https://h.example.com/v1/keys/abcd1234efgh5678/chat", "https://h.example.com/v1/keys/[REDACTED]/chat"},
		{"slack webhook", `Post "https://hooks.slack.com/services/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": EOF`,
			`Post "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/[REDACTED]": EOF`},
		{"discord webhook", "https://discord.com/api/webhooks/112233445566778899/Zx9_Yw8-Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
			"https://discord.com/api/webhooks/112233445566778899/[REDACTED]"},
		{"path after a query-less url", "see https://h/x/abcdefgh12345678ijkl and retry", "see https://h/x/[REDACTED] and retry"},
		{"path after a port", "http://u:p@h:8080/a/b/a1B2c3D4e5F6g7H8W", "http://u:[REDACTED]@h:8080/a/b/[REDACTED]"},
		{"long path after a port", "http://h:8080/a/0123456789abcdef0123456789abcdef/x", "http://h:8080/a/[REDACTED]/x"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Text(tt.in, nil, 0)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, got, Text(got, nil, 0), "a second Text changes nothing")
			assert.Equal(t, got != tt.in, IsSecret(tt.in, nil))
			assert.False(t, IsSecret(got, nil), "what Text wrote is no secret")
		})
	}
}

func TestTextKeepsMoreOrdinaryText(t *testing.T) {
	for _, s := range []string{
		"token limit exceeded",
		"credential expired",
		"bearer token missing",
		"bearer credential expired",
		"invalid credentials",
		"the token 2024-01-01 expired", // no letter among the digits
		"tokens 1234abcd used",         // "tokens" is no name of one
		"max_tokens abcd1234",
		"Cookie: none",
		"cookies: 3",
		"?sessions=2&author=me&auth_type=basic&session_id",
		// A URL's path keeps IDs, UUIDs, model names and dated versions.
		"https://api.openai.com/v1/chat/completions/chatcmpl-AbC123dEf456GhI789jKl012",
		"https://api.anthropic.com/v1/messages/batches/msgbatch_01HkcTjaV5uDC8jWR4ZsDV8d",
		"https://api.openai.com/v1/files/file-abc123DEF456ghi789/content",
		"https://h/v1/threads/thread_abc123DEF456ghi789/runs/run_abc123DEF456ghi789",
		"https://h/v1/requests/123e4567-e89b-12d3-a456-426614174000",
		"https://h/v1/models/gpt-4o-mini-2024-07-18",
		"https://h/model/anthropic.claude-3-5-sonnet-20241022-v2:0/invoke",
		"https://h/v1beta/models/gemini-1.5-pro-002:generateContent",
		"https://h.openai.azure.com/openai/deployments/my-gpt4o-2024/chat/completions?api-version=2024-06-01",
		"https://h/v1/report2024final.pdf", // not only key characters
		// A file path is judged as text: only a URL's path is this strict.
		"open /tmp/TestRunTaskCheckpoint2874651/001/task.json: permission denied",
	} {
		assert.Equal(t, s, Text(s, nil, 0))
		assert.False(t, IsSecret(s, nil), "%q", s)
	}
}

func TestKnown(t *testing.T) {
	known := []string{"sk-live-0123456789", "tok-abcdefgh", "short"}
	assert.Equal(t, "key [REDACTED] and [REDACTED], again [REDACTED], short",
		Known("key sk-live-0123456789 and tok-abcdefgh, again sk-live-0123456789, short", known))
	assert.Equal(t, "[REDACTED]", Known("sk-live-0123456789tok-abcdefgh"[:18+8], []string{"sk-live-0123456789", "9tok-abcdefgh"[:9]}),
		"overlapping values become one [REDACTED]")
	assert.Equal(t, "sk-proj-AbCdEf1234567890", Known("sk-proj-AbCdEf1234567890", known), "the patterns are not Known's")
}

// TestTextCap holds the cap to engine.Truncate's cut, made after the
// redaction, and to no cut at all at 0.
func TestTextCap(t *testing.T) {
	s := strings.Repeat("é ", 10) + "key sk-proj-AbCdEf1234567890 and hunter2hunter2"
	known := []string{"hunter2hunter2"}
	for _, limit := range []int{1, 3, 10, 29, 30, 31, 40, 45, 1 << 10} {
		got := Text(s, known, limit)
		assert.Equal(t, engine.Truncate(Text(s, known, 0), limit), got, "limit %d", limit)
		assert.LessOrEqual(t, len(got), max(limit, len("…")))
		assert.True(t, utf8.ValidString(got))
		assert.NotContains(t, got, "AbCdEf", "limit %d", limit)
	}
	assert.Equal(t, "é é …", Text(s, known, 10), "cut back to a character's start")
	assert.Equal(t, "é é é é é é é é é é key sk-[REDACTED] and [REDACTED]", Text(s, known, 0), "no cut at 0")
	plain := "nothing to redact here"
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = Text(plain, known, len(plain)) }))
}

// TestIsSecret holds IsSecret to Text: true exactly when Text changes the
// text, also where a change gives back the same bytes, and without
// allocating on text a pattern matches.
func TestIsSecret(t *testing.T) {
	for _, tt := range []struct {
		in    string
		known []string
	}{
		{"401 invalid_api_key: Incorrect API key provided: sk-proj-AbCdEf1234567890", nil},
		{"503 server_error: The server had an error", nil},
		{"password=[REDACTED]", nil},                                // a value [REDACTED] is replaced by the same bytes
		{"Bearer [REDACTED] and sk-[REDACTED]", nil},                // so are these
		{"x password=hunter2hunter2 y", []string{"hunter2hunter2"}}, // known, then the pattern on [REDACTED]
		{"the key hunter2hunter2", []string{"hunter2hunter2"}},
		{"the key hunter2hunter", []string{"hunter2hunter2"}},
		{"password=[REDACTED]", []string{"REDACTED"}},                           // [[REDACTED]], then the pattern: the same bytes
		{"see [REDACTED] here", []string{"[REDACTED]"}},                         // replaced by itself
		{"see [REDACTED] here", []string{"[REDACTE", "EDACTED]"}},               // two that make one [REDACTED]
		{"see [REDACTED]] here", []string{"[REDACTE", "EDACTED]", "ED]] here"}}, // not when the run goes on
		{"see [REDACTED] here", []string{"[REDACTE"}},
		{"short", []string{"short"}},
	} {
		text := Text(tt.in, tt.known, 0)
		assert.Equal(t, text != tt.in, IsSecret(tt.in, tt.known), "IsSecret(%q, %q); Text = %q", tt.in, tt.known, text)
		known := Known(tt.in, tt.known)
		assert.Equal(t, known != tt.in, HasKnown(tt.in, tt.known), "HasKnown(%q, %q); Known = %q", tt.in, tt.known, known)
		if !HasKnown(tt.in, tt.known) && !strings.Contains(strings.Join(tt.known, ""), "[") {
			assert.Zero(t, testing.AllocsPerRun(10, func() { _ = IsSecret(tt.in, tt.known) }), "%q", tt.in)
		}
	}
	assert.True(t, IsSecret("x hunter2hunter2 y", []string{"hunter2hunter2"}))
	assert.False(t, IsSecret("password=[REDACTED]", []string{"REDACTED"}))
	assert.False(t, HasKnown("see [REDACTED] here", []string{"[REDACTE", "EDACTED]"}))
}

func TestValue(t *testing.T) {
	assert.Equal(t, "gpt-4o-mini-2024-07-18", Value("gpt-4o-mini-2024-07-18", nil))
	assert.Equal(t, Redacted, Value("model-sk-proj-AbCdEf1234567890", nil), "the rest of a value with a secret names nothing")
	assert.Equal(t, Redacted, Value("resp_hunter2hunter2", []string{"hunter2hunter2"}))
	assert.Equal(t, "resp_abc", Value("resp_abc", []string{"hunter2hunter2"}))
}

// A Memo answers as Text does, for each text in any order (the same again,
// another, a secret, the same text cut to another length), from goroutines
// at once; and the same text again is answered by what it remembered, not
// scanned again.
func TestMemo(t *testing.T) {
	texts := []struct {
		s     string
		limit int
	}{
		{"503 service unavailable", 0},
		{"503 service unavailable", 0},
		{"401 invalid_api_key: Incorrect API key provided: sk-proj-AbCdEf1234567890", 0},
		{"401 invalid_api_key: Incorrect API key provided: sk-proj-AbCdEf1234567890", 20},
		{"401 invalid_api_key: Incorrect API key provided: sk-proj-AbCdEf1234567890", 20},
		{"503 service unavailable", 12},
		{"", 0},
		{"Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJlMTIzNDU2", 0},
		{"503 service unavailable", 0},
	}
	var m Memo
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				for _, tt := range texts {
					assert.Equal(t, Text(tt.s, nil, tt.limit), m.Text(tt.s, tt.limit), "%q cut to %d", tt.s, tt.limit)
				}
			}
		})
	}
	wg.Wait()
	in := "token=abcd1234efgh5678 was rejected"
	first, again := m.Text(in, 0), m.Text(in, 0)
	assert.NotEqual(t, in, first, "the secret is redacted")
	assert.True(t, unsafe.StringData(first) == unsafe.StringData(again), "the same text scanned again")
}
