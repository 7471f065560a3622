package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/runtime"
)

// memStore is a Store a user might back with a database.
type memStore struct {
	mu    sync.Mutex
	data  map[string][]byte
	held  map[string]bool // the tasks whose lock a writer holds
	saves int
}

// Lock refuses a second writer of a task at once, as a Store must.
func (m *memStore) Lock(_ context.Context, id string) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[id] {
		return nil, fmt.Errorf("memstore: task %q: %w", id, runtime.ErrTaskRunning)
	}
	if m.held == nil {
		m.held = map[string]bool{}
	}
	m.held[id] = true
	return sync.OnceFunc(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.held, id)
	}), nil
}

func (m *memStore) Load(_ context.Context, id string) (*runtime.Checkpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.data[id]
	if !ok {
		return nil, nil
	}
	var cp runtime.Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, runtime.UnusableCheckpoint(id, "checkpoint_corrupt", err)
	}
	return &cp, nil
}

func (m *memStore) Save(_ context.Context, cp *runtime.Checkpoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	var saved runtime.Checkpoint
	if json.Unmarshal(m.data[cp.TaskID], &saved) == nil && len(saved.Steps) > len(cp.Steps) {
		return fmt.Errorf("memstore: task %q: %w", cp.TaskID, runtime.ErrCheckpointBehind)
	}
	if m.data == nil {
		m.data = map[string][]byte{}
	}
	m.data[cp.TaskID] = b
	m.saves++
	return nil
}

// steps makes n steps; calls counts each step's calls; behave decides a
// step's error on its k-th call.
func steps(n int, calls map[int]int, behave func(step, call int) error) []runtime.Step {
	var out []runtime.Step
	for i := 1; i <= n; i++ {
		out = append(out, runtime.Step{Name: fmt.Sprintf("step-%02d", i), Run: func(ctx context.Context, s runtime.StepContext) (any, error) {
			calls[s.Step]++
			if err := behave(s.Step, calls[s.Step]); err != nil {
				return nil, err
			}
			return map[string]any{"step": s.Step, "key": s.Key, "prev": len(s.Results)}, nil
		}})
	}
	return out
}

var errCrash = errors.New("the process died")

func taskConfig(store runtime.Store) runtime.TaskConfig {
	return runtime.TaskConfig{Store: store, Options: []middleware.Option{middleware.WithClock(clock.NewVirtual(epoch))}}
}

func TestTaskResumesAfterLastCompletedStep(t *testing.T) {
	store := &memStore{}
	calls := map[int]int{}
	crashing := true
	task := runtime.Task{ID: "batch-7", Steps: steps(30, calls, func(step, call int) error {
		switch {
		case step == 9:
			return &policies.Error{StatusCode: 400, Code: "invalid_image", Message: "Invalid image"}
		case step == 18 && crashing:
			return &policies.Error{Class: policies.Canceled, Err: errCrash} // stands for the process dying here
		}
		return nil
	})}

	rep, err := runtime.RunTask(context.Background(), task, taskConfig(store))
	require.ErrorIs(t, err, errCrash)
	assert.Equal(t, 1, rep.ResumedAt)
	assert.Len(t, rep.Steps, 17)
	assert.Equal(t, []int{9}, rep.Failed(), "the permanent failure is recorded")
	first, _ := store.Load(context.Background(), "batch-7")

	crashing = false
	rep, err = runtime.RunTask(context.Background(), task, taskConfig(store))
	require.NoError(t, err)
	assert.Equal(t, 18, rep.ResumedAt)
	assert.Equal(t, []int{18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30}, rep.Ran)
	assert.Len(t, rep.Steps, 30)
	assert.Equal(t, first.Steps, rep.Steps[:17], "steps 1–17 kept as they were")
	assert.Equal(t, 1, calls[9], "a recorded permanent failure is not called again")
	assert.Equal(t, 1, calls[17])
	assert.Equal(t, 2, calls[18])
	var r struct{ Key string }
	require.NoError(t, json.Unmarshal(rep.Steps[17].Result, &r))
	assert.Equal(t, "batch-7/18", r.Key, "the idempotency key is task id + step")
	assert.Equal(t, "invalid_image", rep.Steps[8].Error.Type)
	assert.Equal(t, runtime.StepFailed, rep.Steps[8].Status)
}

func TestTaskFatalStopsAndIsRecorded(t *testing.T) {
	store := &memStore{}
	calls := map[int]int{}
	task := runtime.Task{ID: "t", Steps: steps(5, calls, func(step, _ int) error {
		if step == 3 {
			return &policies.Error{StatusCode: 429, Code: "insufficient_quota"}
		}
		return nil
	})}
	rep, err := runtime.RunTask(context.Background(), task, taskConfig(store))
	require.Error(t, err)
	assert.Len(t, rep.Steps, 3)
	rep, err = runtime.RunTask(context.Background(), task, taskConfig(store))
	require.NoError(t, err, "the fatal step is recorded; a new run goes on after it")
	assert.Equal(t, 4, rep.ResumedAt)
	assert.Equal(t, 1, calls[3])
}

func TestTaskRetriesTransientSteps(t *testing.T) {
	calls := map[int]int{}
	task := runtime.Task{ID: "t", Steps: steps(2, calls, func(step, call int) error {
		if step == 2 && call < 3 {
			return &policies.Error{StatusCode: 503}
		}
		return nil
	})}
	rep, err := runtime.RunTask(context.Background(), task, taskConfig(&memStore{}))
	require.NoError(t, err)
	assert.Equal(t, 3, calls[2])
	assert.Equal(t, 3, rep.Steps[1].Attempts)
}

func TestTaskRefusesAForeignCheckpoint(t *testing.T) {
	store := &memStore{}
	calls := map[int]int{}
	_, err := runtime.RunTask(context.Background(), runtime.Task{ID: "t", Steps: steps(3, calls, func(int, int) error { return nil })}, taskConfig(store))
	require.NoError(t, err)
	other := steps(3, calls, func(int, int) error { return nil })
	other[1].Name = "renamed"
	_, err = runtime.RunTask(context.Background(), runtime.Task{ID: "t", Steps: other}, taskConfig(store))
	requireUnusable(t, err)
	assert.Contains(t, err.Error(), `step 2 is "step-02" in the checkpoint and "renamed" in the task`)
	assert.Equal(t, 1, calls[1], "nothing ran again")
}

func TestTaskStopsOnAnUnreadableCheckpoint(t *testing.T) {
	store := &memStore{data: map[string][]byte{"t": []byte(`{"version":1,"task_id":"t","steps":[{"ste`)}}
	calls := map[int]int{}
	_, err := runtime.RunTask(context.Background(), runtime.Task{ID: "t", Steps: steps(3, calls, func(int, int) error { return nil })}, taskConfig(store))
	requireUnusable(t, err)
	assert.Empty(t, calls, "never silently restarted from scratch")
}

func TestTaskPanicIsNotRecorded(t *testing.T) {
	store := &memStore{}
	calls := map[int]int{}
	task := runtime.Task{ID: "t", Steps: steps(3, calls, func(step, _ int) error {
		if step == 2 {
			panic("bug")
		}
		return nil
	})}
	_, err := runtime.RunTask(context.Background(), task, taskConfig(store))
	var pe *policies.Error
	require.ErrorAs(t, err, &pe)
	cp, _ := store.Load(context.Background(), "t")
	assert.Len(t, cp.Steps, 1, "a bug is not a permanent result: once fixed, the step runs again")
}

// With the file store: a truncated checkpoint stops the task with an error
// that names the file, and nothing runs again.
func TestTaskWithFileStoreRefusesATruncatedCheckpoint(t *testing.T) {
	store, err := runtime.NewFileStore(t.TempDir())
	require.NoError(t, err)
	calls := map[int]int{}
	task := runtime.Task{ID: "nightly", Steps: steps(4, calls, func(step, _ int) error {
		if step == 3 {
			return &policies.Error{Class: policies.Programming, Err: errCrash}
		}
		return nil
	})}
	_, err = runtime.RunTask(context.Background(), task, taskConfig(store))
	require.Error(t, err)
	path := store.Path("nightly")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw[:len(raw)/2], 0o644))

	clear(calls)
	_, err = runtime.RunTask(context.Background(), task, taskConfig(store))
	ce := requireUnusable(t, err)
	assert.Contains(t, ce.Message, "checkpoint "+path+" cannot be used")
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "will not start over")
	assert.Empty(t, calls, "never silently restarted from scratch")
}

// A step's error text is redacted before it is written into the checkpoint:
// the file on disk holds none of the token, password and key the error
// carried, while the rest of the text is kept to say what failed.
func TestTaskCheckpointHoldsNoSecrets(t *testing.T) {
	const text = "upload to https://user:pa55word@host/x?api_key=sk-proj-abcdefghijklmnop refused; " +
		"sent Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789"
	secrets := []string{"pa55word", "sk-proj-abcdefghijklmnop", "abcdefghijklmnopqrstuvwxyz0123456789"}
	cases := map[string]error{
		"a tool's explicit permanent error": &policies.Error{Class: policies.Permanent, Type: "upload_refused", Err: errors.New(text)},
		"a provider's 400 answer":           &policies.Error{StatusCode: 400, Code: "invalid_request", Message: text},
	}
	for name, stepErr := range cases {
		t.Run(name, func(t *testing.T) {
			store, _ := fsNewStore(t)
			calls := map[int]int{}
			task := runtime.Task{ID: "upload", Steps: steps(3, calls, func(step, _ int) error {
				if step == 2 {
					return stepErr
				}
				return nil
			})}
			rep, err := runtime.RunTask(context.Background(), task, taskConfig(store))
			require.NoError(t, err, "a permanent failure is recorded and the task goes on")
			require.Equal(t, []int{2}, rep.Failed())

			raw, err := os.ReadFile(store.Path("upload"))
			require.NoError(t, err)
			for _, secret := range secrets {
				assert.NotContains(t, string(raw), secret, "the checkpoint file holds a secret")
			}
			msg := rep.Steps[1].Error.Message
			assert.Contains(t, msg, "upload to https://", "what failed is still said")
			quoted, err := json.Marshal(msg)
			require.NoError(t, err)
			assert.Contains(t, string(raw), string(quoted), "the message written is the redacted one")
		})
	}
}

// A step retry that leaves MaxAttempts zero takes RuntimeRetry field by
// field: the classifier it sets is kept, so a rule that makes an error
// Permanent stops the step after one call, not RuntimeRetry's three.
func TestTaskRetryPresetKeepsTheClassifier(t *testing.T) {
	calls := map[int]int{}
	task := runtime.Task{ID: "t", Steps: steps(1, calls, func(int, int) error { return errors.New("vendor: account locked") })}
	cfg := taskConfig(&memStore{})
	cfg.Retry = policies.RetryConfig{
		Classifier: policies.NewClassifier(func(err error) (policies.Classification, bool) {
			return policies.Classification{Class: policies.Permanent, Reason: "locked"}, err.Error() == "vendor: account locked"
		}),
		Clock: cfg.Retry.Clock,
	}
	rep, err := runtime.RunTask(context.Background(), task, cfg)
	require.NoError(t, err, "a permanent failure is recorded, and the task goes on")
	assert.Equal(t, 1, calls[1], "the rule the retry was given decided")
	require.Len(t, rep.Steps, 1)
	assert.Equal(t, runtime.StepFailed, rep.Steps[0].Status)
}

// requireUnusable is err's unusable checkpoint, made by UnusableCheckpoint.
func requireUnusable(t *testing.T, err error) *policies.Error {
	t.Helper()
	ce, ok := errors.AsType[*policies.Error](err)
	require.True(t, ok && isUnusable(err), "a checkpoint that cannot be used: %v", err)
	assert.Equal(t, policies.Fatal, ce.Class)
	return ce
}

// isUnusable reports whether err holds a checkpoint that cannot be used.
func isUnusable(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ce, ok := e.(*policies.Error); ok && ce.Reason == "checkpoint unusable" {
			return true
		}
	}
	return false
}
