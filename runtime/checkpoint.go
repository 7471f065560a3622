package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
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
	Error      *StepError      `json:"error,omitempty"`
	Attempts   int             `json:"attempts"`
	FinishedAt time.Time       `json:"finished_at"`
}

// StepError is a recorded step failure.
type StepError struct {
	Class   string `json:"class"`
	Type    string `json:"type"`
	Message string `json:"message"` // redacted
}

// Store keeps checkpoints. Implementations must make Save atomic: a reader
// sees the old state or the new one, never a mix, even if the writer dies
// during the write.
type Store interface {
	// Load returns the task's checkpoint, or nil and no error when the task
	// has none. A checkpoint that cannot be read is a *CheckpointError: the
	// task must not silently start over.
	Load(ctx context.Context, taskID string) (*Checkpoint, error)
	// Save replaces the task's checkpoint.
	Save(ctx context.Context, cp *Checkpoint) error
}

// CheckpointError is a checkpoint that exists but cannot be used: truncated,
// garbled, of another version or of another task.
type CheckpointError struct {
	Path string // the file, or the store's name for it
	Err  error
}

func (e *CheckpointError) Error() string {
	return fmt.Sprintf("checkpoint %s cannot be used: %v; the task will not start over on its own: fix or delete the file to run it from the first step", e.Path, e.Err)
}

func (e *CheckpointError) Unwrap() error { return e.Err }

// IdempotencyKey is the key of a task's step: the same on every run, so that
// a tool with side effects can recognise a step that committed but was not
// checkpointed before a crash.
func IdempotencyKey(taskID string, step int) string {
	return fmt.Sprintf("%s/%d", taskID, step)
}
