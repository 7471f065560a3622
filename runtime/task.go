package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// Task is a long job of steps that saves its state after every step, so
// that a run that dies resumes where it stopped.
type Task struct {
	ID    string // a file name's worth of [A-Za-z0-9._-]
	Steps []Step
}

// Step is one step of a task. Its result is encoded as JSON and kept in the
// checkpoint.
type Step struct {
	Name string
	Run  func(ctx context.Context, s StepContext) (any, error)
}

// StepContext is what a step knows about itself.
type StepContext struct {
	TaskID string
	Step   int    // 1-based
	Key    string // the idempotency key, "<task id>/<step>": the same on every run
	// Results holds the results of the steps done before this one, by step
	// number (restored from the checkpoint on a resumed run).
	Results map[int]json.RawMessage
}

// TaskConfig configures RunTask.
type TaskConfig struct {
	// Store keeps the checkpoints; nil keeps none (the task cannot resume).
	Store Store
	// Retry is each step's retry; a zero MaxAttempts means
	// policies.RuntimeRetry, field by field (what else is set is kept).
	Retry policies.RetryConfig
	// Options configure the task's and steps' spans and clock.
	Options []middleware.Option
	// Now stamps the records; nil → time.Now.
	Now func() time.Time
}

// TaskReport is what a run of a task did.
type TaskReport struct {
	TaskID    string
	ResumedAt int          // the first step this run ran; 1 for a fresh task
	Ran       []int        // the steps this run called
	Steps     []StepRecord // every finished step, from the checkpoint and this run
}

// Failed lists the steps recorded as permanent failures.
func (r *TaskReport) Failed() []int {
	var out []int
	for _, s := range r.Steps {
		if s.Status == StepFailed {
			out = append(out, s.Step)
		}
	}
	return out
}

// RunTask runs the task's steps in order, each through a "step" layer with
// its retry, and saves a checkpoint after every step that finishes. With a
// Store, it first takes the task's lock (Store.Lock) and holds it until it
// returns: a run of a task that is running already fails at once with an
// error matching ErrTaskRunning, running nothing. (Without a Store, runs
// share nothing that a second one could spoil, and nothing is locked.) A
// task that finds a checkpoint resumes after the last step recorded in it;
// a checkpoint that cannot be read stops it with an error made by UnusableCheckpoint instead
// of starting over. A step that fails permanently is recorded (so a resumed
// run does not call it again) and the task goes on; a fatal failure is
// recorded and stops the task; a step that is still failing when its
// retries run out stops the task unrecorded, to be tried again on the next
// run.
func RunTask(ctx context.Context, task Task, cfg TaskConfig) (*TaskReport, error) {
	// Field by field, as every layer fills its preset: a classifier, clock,
	// jitter source or budget the caller set is kept.
	cfg.Retry = cfg.Retry.OrPreset(policies.RuntimeRetry)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cp := &Checkpoint{Version: CheckpointVersion, TaskID: task.ID}
	if cfg.Store != nil {
		// The lock comes before the load: a run that loaded the checkpoint
		// before another run's lock would resume from a state that run
		// goes on to change.
		unlock, err := cfg.Store.Lock(ctx, task.ID)
		if err != nil {
			return nil, err
		}
		if unlock != nil {
			defer unlock()
		}
		loaded, err := cfg.Store.Load(ctx, task.ID)
		if err != nil {
			return nil, err
		}
		if loaded != nil {
			if err := matches(loaded, task); err != nil {
				return nil, UnusableCheckpoint(task.ID, "checkpoint_mismatch", err)
			}
			cp = loaded
		}
	}
	rep := &TaskReport{TaskID: task.ID, ResumedAt: len(cp.Steps) + 1}
	run := middleware.Layer[Task, *TaskReport]("task", middleware.Spec[*TaskReport]{}, append([]middleware.Option{middleware.WithSpanName("task " + task.ID), middleware.WithAttributes(
		telemetry.TaskID.String(task.ID), telemetry.TaskSteps.Int(len(task.Steps)),
	)}, cfg.Options...)...)(func(ctx context.Context, task Task) (*TaskReport, error) {
		trace.SpanFromContext(ctx).SetAttributes(telemetry.TaskResumedAt.Int(rep.ResumedAt))
		err := runSteps(ctx, task, cfg, cp, rep)
		rep.Steps = cp.Steps
		return rep, err
	})
	return run(ctx, task)
}

func runSteps(ctx context.Context, task Task, cfg TaskConfig, cp *Checkpoint, rep *TaskReport) error {
	results := map[int]json.RawMessage{}
	for _, r := range cp.Steps {
		if r.Status == StepDone {
			results[r.Step] = r.Result
		}
	}
	for i := len(cp.Steps); i < len(task.Steps); i++ {
		n, st := i+1, task.Steps[i]
		sc := StepContext{TaskID: task.ID, Step: n, Key: IdempotencyKey(task.ID, n), Results: results}
		layer := middleware.Layer[StepContext, any]("step", middleware.Spec[any]{
			Policies: []failsafe.Policy[any]{policies.NewRetry[any](cfg.Retry)},
		}, append([]middleware.Option{middleware.WithSpanName(fmt.Sprintf("step %d %s", n, st.Name)), middleware.WithAttributes(
			telemetry.Step.Int(n), telemetry.StepKey.String(sc.Key),
		)}, cfg.Options...)...)
		rep.Ran = append(rep.Ran, n)
		attempts := 0
		out, err := layer(func(ctx context.Context, sc StepContext) (any, error) {
			attempts++
			return st.Run(ctx, sc)
		})(ctx, sc)
		rec := StepRecord{Step: n, Name: st.Name, Key: sc.Key, Attempts: attempts, FinishedAt: cfg.Now().UTC()}
		fe, _ := errors.AsType[*policies.Error](err)
		switch {
		case err == nil:
			b, merr := json.Marshal(out)
			if merr != nil {
				return fmt.Errorf("task %s: step %d (%s): its result cannot be kept: %w", task.ID, n, st.Name, merr)
			}
			rec.Status, rec.Result = StepDone, b
			results[n] = b
		case recordable(fe):
			rec.Status = StepFailed
			rec.Error = &StepFailure{Class: string(fe.Class), Type: fe.Type, Message: redact.Text(fe.Err.Error(), engine.SecretsFrom(ctx), 0)}
		default:
			return fmt.Errorf("task %s stopped at step %d (%s), to be resumed there: %w", task.ID, n, st.Name, err)
		}
		cp.Steps = append(cp.Steps, rec)
		cp.UpdatedAt = rec.FinishedAt
		if cfg.Store != nil {
			if err := cfg.Store.Save(ctx, cp); err != nil {
				return fmt.Errorf("task %s: saving the checkpoint after step %d: %w", task.ID, n, err)
			}
		}
		if rec.Status == StepFailed && fe.Class == policies.Fatal {
			return fmt.Errorf("task %s stopped at step %d (%s), which failed fatally: %w", task.ID, n, st.Name, err)
		}
	}
	return nil
}

// recordable reports whether a step's failure is final: retrying the step
// on a later run would fail the same way. A programming error is not: once
// the bug is fixed, the next run must call the step again.
func recordable(fe *policies.Error) bool {
	if fe == nil || fe.Outcome != telemetry.OutcomeFailedPermanent && fe.Outcome != telemetry.OutcomeFailedFatal {
		return false
	}
	switch fe.Class {
	case policies.Permanent, policies.Fatal, policies.ContextOverflow:
		return true
	}
	return false
}

// matches checks that a checkpoint was written for this task's steps.
func matches(cp *Checkpoint, task Task) error {
	if cp.TaskID != task.ID {
		return fmt.Errorf("it belongs to task %q, not %q", cp.TaskID, task.ID)
	}
	if len(cp.Steps) > len(task.Steps) {
		return fmt.Errorf("it records %d steps; the task has %d", len(cp.Steps), len(task.Steps))
	}
	var diffs []string
	for i, r := range cp.Steps {
		if r.Name != task.Steps[i].Name {
			diffs = append(diffs, fmt.Sprintf("step %d is %q in the checkpoint and %q in the task", i+1, r.Name, task.Steps[i].Name))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("it was written for other steps: %s", strings.Join(diffs, "; "))
	}
	return nil
}
