package redisstate

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/retrace-go/retrace/policies/state"
)

var _ state.Stepper = (*Store)(nil)

// encoded is a step as the batch script reads it.
type encoded struct {
	keys []string
	args []any
	slot string // the keys' hash tag, or the key: steps of one slot run together on a cluster
}

func (s *Store) encode(st state.Step) (encoded, error) {
	gate := "0"
	if st.Gate {
		gate = "1"
	}
	var e encoded
	var kind string
	var args []any
	switch {
	case st.Breaker != nil:
		a, err := s.breakerArgs(*st.Breaker)
		if err != nil {
			return e, err
		}
		kind, args, e.keys = "b", a, []string{s.key(st.Key)}
	case st.Draw != nil:
		kind, args, e.keys = "d", []any{st.Draw.Limit, ttlMs(st.Draw.TTL)}, []string{s.key(st.Key)}
	case st.Ratio != nil:
		kind = "q"
		e.keys, args = s.ratioStep(st.Key, *st.Ratio)
	}
	e.args = append([]any{kind, gate, len(args)}, args...)
	e.slot = hashSlot(e.keys[0])
	return e, nil
}

// hashSlot is what decides a key's cluster slot: its hash tag if it has
// one, else the whole key.
func hashSlot(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// Steps implements state.Stepper: one script for the batch, on one round
// trip. On a Redis Cluster a script runs on one node, so the batch is cut
// where its keys change slot, and the parts run in order, each atomic; a
// gate that refuses stops the parts after its own.
func (s *Store) Steps(ctx context.Context, steps []state.Step) ([]state.StepResult, error) {
	if err := state.Valid(steps); err != nil {
		return nil, err
	}
	enc := make([]encoded, len(steps))
	for i, st := range steps {
		e, err := s.encode(st)
		if err != nil {
			return nil, err
		}
		enc[i] = e
	}
	_, cluster := s.rdb.(*redis.ClusterClient)
	out := make([]state.StepResult, len(steps))
	for from := 0; from < len(steps); {
		to := len(steps)
		if cluster {
			to = from + 1
			for to < len(steps) && enc[to].slot == enc[from].slot {
				to++
			}
		}
		if err := s.runBatch(ctx, steps[from:to], enc[from:to], out[from:to]); err != nil {
			return nil, err
		}
		for i := from; i < to; i++ {
			if steps[i].Gate && steps[i].Refused(out[i]) {
				for j := to; j < len(steps); j++ {
					out[j].Skipped = true
				}
				return out, nil
			}
		}
		from = to
	}
	return out, nil
}

// runBatch runs one part of a batch, whose keys share a slot, and decodes
// its replies into out.
func (s *Store) runBatch(ctx context.Context, steps []state.Step, enc []encoded, out []state.StepResult) error {
	var keys []string
	args := []any{len(enc), s.channel()}
	for _, e := range enc {
		keys = append(keys, e.keys...)
		args = append(args, e.args...)
	}
	res, err := s.run(ctx, script, keys, args...)
	if err != nil {
		return err
	}
	if len(res) != len(steps) {
		return fmt.Errorf("redisstate: %s: %w", keys[0], ErrReply)
	}
	for i, st := range steps {
		r, ok := res[i].([]any)
		if !ok {
			return fmt.Errorf("redisstate: %s: %w", st.Key, ErrReply)
		}
		if len(r) == 0 {
			out[i].Skipped = true
			continue
		}
		switch {
		case st.Breaker != nil:
			out[i].Breaker, err = breakerView(r)
		case st.Draw != nil:
			out[i].Draw, err = drawView(r)
		case st.Ratio != nil:
			out[i].Ratio, err = ratioView(r)
		}
		if err != nil {
			return fmt.Errorf("redisstate: %s: %w", st.Key, err)
		}
	}
	return nil
}
