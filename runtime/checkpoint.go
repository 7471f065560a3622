package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/retrace-go/retrace/policies"
)

// CheckpointVersion is the version of the checkpoint format this build
// writes and reads.
const CheckpointVersion = 1

// Checkpoint is a task's saved state: every step that finished, in order.
type Checkpoint struct {
	Version   int          `json:"version"`
	TaskID    string       `json:"task_id"`
	Steps     []StepRecord `json:"steps"` // the finished steps, Step 1, 2, … in order
	UpdatedAt time.Time    `json:"updated_at"`
}

// StepStatus is how a recorded step ended.
type StepStatus string

const (
	// StepDone is a step that succeeded; its Result is kept.
	StepDone StepStatus = "done"
	// StepFailed is a step that failed permanently (or fatally): it is
	// recorded so that a resumed task does not call it again.
	StepFailed StepStatus = "failed_permanent"
)

// StepRecord is one finished step.
type StepRecord struct {
	Step       int             `json:"step"` // 1-based
	Name       string          `json:"name"`
	Status     StepStatus      `json:"status"`
	Key        string          `json:"idempotency_key"` // "<task id>/<step>"
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *StepFailure    `json:"error,omitempty"`
	Attempts   int             `json:"attempts"`
	FinishedAt time.Time       `json:"finished_at"`
}

// StepFailure is a recorded step failure.
type StepFailure struct {
	Class   string `json:"class"`
	Type    string `json:"type"`
	Message string `json:"message"` // redacted
}

// Store keeps checkpoints. Implementations must make Save atomic: a reader
// sees the old state or the new one, never a mix, even if the writer dies
// during the write.
type Store interface {
	// Lock makes the caller the task's only writer until it calls unlock,
	// which must be safe to call more than once. It must not wait: while
	// another writer holds the task's lock, Lock fails at once with an
	// error that matches ErrTaskRunning. RunTask locks the task before it
	// loads the checkpoint and unlocks it when it returns, so that two runs
	// of one task never run its steps twice over. The lock must die with
	// its holder: a writer that crashed must not keep the task locked.
	Lock(ctx context.Context, taskID string) (unlock func(), err error)
	// Load returns the task's checkpoint, or nil and no error when the task
	// has none. A checkpoint that cannot be read is an error made by [UnusableCheckpoint]: the
	// task must not silently start over.
	Load(ctx context.Context, taskID string) (*Checkpoint, error)
	// Save replaces the task's checkpoint. It must never replace one that
	// has more finished steps than cp: it fails with an error that matches
	// ErrCheckpointBehind instead.
	Save(ctx context.Context, cp *Checkpoint) error
}

// ErrCheckpointBehind is matched, with errors.Is, by the error of a Store's
// Save that refuses to replace the saved checkpoint with one that has fewer
// finished steps: the writer has fallen behind another one.
//
// It is classified policies.Fatal, type "checkpoint_behind": the writer
// holds an older state than the saved one, and going on would run again
// steps already recorded (with their side effects). It must stop; a new run
// resumes from the saved checkpoint.
var ErrCheckpointBehind error = &policies.Error{
	Class: policies.Fatal, Type: "checkpoint_behind",
	Err: errors.New("a checkpoint never replaces one with more finished steps"),
}

// UnusableCheckpoint is the error of a checkpoint that exists but cannot be used:
// truncated, garbled, of another version or of another task, or at a path
// that is not a regular file. path is the file, or the store's name for it;
// typ its error.type ("checkpoint_corrupt", …). It is Fatal: the task must
// not silently start over, and no retry reads a different file.
func UnusableCheckpoint(path, typ string, err error) error {
	return &policies.Error{Class: policies.Fatal, Type: typ, Reason: "checkpoint unusable", Err: err,
		Message: fmt.Sprintf("checkpoint %s cannot be used: %v; the task will not start over on its own: fix or delete the file to run it from the first step", path, err)}
}

// IdempotencyKey is the key of a task's step: the same on every run, so that
// a tool with side effects can recognise a step that committed but was not
// checkpointed before a crash.
func IdempotencyKey(taskID string, step int) string {
	return fmt.Sprintf("%s/%d", taskID, step)
}
