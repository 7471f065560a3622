package runtime_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/runtime"
)

// The credentials the task's context knows (policies.WithSecrets) are
// redacted by their exact value in the checkpoint a failed step writes,
// where no pattern would find them; a token after the word that names it is
// redacted too.
func TestTaskCheckpointHoldsNoKnownSecret(t *testing.T) {
	const key = "Zq7xW2.tenant.91" // in no shape a pattern knows: only its exact value can redact it
	const token = "tok_live_51HabcdEFGH123"
	cases := map[string]error{
		"a tool's explicit permanent error": &policies.Error{Class: policies.Permanent, Type: "upload_refused",
			Err: errors.New("upload with " + key + " refused: invalid bearer credential " + token)},
		"a provider's 400 answer": &policies.Error{StatusCode: 400, Code: "invalid_request",
			Message: "key " + key + " may not upload; invalid bearer credential " + token},
	}
	for name, stepErr := range cases {
		t.Run(name, func(t *testing.T) {
			store, _ := fsNewStore(t)
			calls := map[int]int{}
			task := runtime.Task{ID: "upload", Steps: steps(2, calls, func(step, _ int) error {
				if step == 1 {
					return stepErr
				}
				return nil
			})}
			rep, err := runtime.RunTask(policies.WithSecrets(context.Background(), key), task, taskConfig(store))
			require.NoError(t, err, "a permanent failure is recorded and the task goes on")
			require.Equal(t, []int{1}, rep.Failed())

			raw, err := os.ReadFile(store.Path("upload"))
			require.NoError(t, err)
			assert.NotContains(t, string(raw), key, "the checkpoint file holds the known secret")
			assert.NotContains(t, string(raw), token, "the checkpoint file holds the token")
			msg := rep.Steps[0].Error.Message
			assert.NotContains(t, msg, key)
			assert.Contains(t, msg, "[REDACTED]")
			assert.Contains(t, msg, "invalid bearer credential [REDACTED]", "what failed is still said")
		})
	}
}
