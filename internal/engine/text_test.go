package engine

import (
	"context"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/clock"
)

func TestTruncate(t *testing.T) {
	assert.Equal(t, "short", Truncate("short", 5))
	assert.Equal(t, "ab…", Truncate("abcdef", 5), "the mark's 3 bytes count")
	cut := Truncate("ééééé", 6) // 10 bytes; a cut in the middle of é moves back
	assert.True(t, utf8.ValidString(cut))
	assert.LessOrEqual(t, len(cut), 6)
	assert.Equal(t, "…", Truncate("abcdef", 2), "a limit below the mark keeps the mark")
}

// panicky's Error panics, as a nil pointer's method does.
type panicky struct{}

func (*panicky) Error() string { panic("nil receiver") }

func TestErrorTextSurvivesAPanickingError(t *testing.T) {
	assert.Equal(t, "boom", ErrorText(errors.New("boom")))
	assert.Contains(t, ErrorText((*panicky)(nil)), "its Error method panicked: nil receiver")
}

func TestSecrets(t *testing.T) {
	ctx := WithSecrets(context.Background(), "sk-live-0123456789", "short")
	assert.Equal(t, []string{"sk-live-0123456789"}, SecretsFrom(ctx), "a value under MinSecretLen is not a secret")
	assert.Equal(t, ctx, WithSecrets(ctx, "sk-live-0123456789"), "nothing new: the same context")
	inner := WithSecrets(ctx, "tok-abcdefgh")
	assert.Equal(t, []string{"sk-live-0123456789", "tok-abcdefgh"}, SecretsFrom(inner), "the contexts above included")
	assert.Nil(t, SecretsFrom(context.Background()))
}

func TestBulkhead(t *testing.T) {
	b := NewBulkhead(0, 0)
	require.Equal(t, 1, b.Size(), "at least one slot")
	require.True(t, b.TryAcquire())
	assert.False(t, b.TryAcquire(), "full")
	ok, err := b.Acquire(context.Background(), nil)
	assert.False(t, ok, "no wait: refused at once")
	assert.NoError(t, err)

	// With a wait: refused when MaxWait passes (on a clock whose every
	// wait is already over), granted when a slot frees (on a clock that
	// never moves), and the context's cause when it has ended.
	b = NewBulkhead(1, time.Second)
	require.True(t, b.TryAcquire())
	ok, err = b.Acquire(context.Background(), elapsed{clock.NewFake(time.Unix(0, 0))})
	assert.False(t, ok, "no slot within MaxWait")
	assert.NoError(t, err)

	frozen := clock.NewFake(time.Unix(0, 0))
	done := make(chan bool)
	go func() {
		ok, _ := b.Acquire(context.Background(), frozen)
		done <- ok
	}()
	b.Release() // before or while the waiter waits: it takes the slot either way
	assert.True(t, <-done, "the freed slot")

	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("the caller left"))
	ok, err = b.Acquire(ctx, frozen)
	assert.False(t, ok)
	assert.EqualError(t, err, "the caller left")
	b.Release()
}

// elapsed is a clock on which every AfterFunc is due at once.
type elapsed struct{ *clock.Fake }

func (elapsed) AfterFunc(_ time.Duration, f func()) clock.Timer {
	f()
	return stopped{}
}

type stopped struct{}

func (stopped) Stop() bool { return false }
