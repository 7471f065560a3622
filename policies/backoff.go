package policies

import "time"

// Backoff is a truncated exponential backoff with optional jitter.
type Backoff struct {
	Base, Cap time.Duration // delay before retry n (n from 1) = min(Cap, Base·2^(n-1)); Base 0 = no delay; Cap 0 = no cap
	Jitter    float64       // 0.5 → each delay is scaled by a random factor in [0.5, 1.0]; 0 = none
}

// Delay returns the delay before retry n (n from 1), drawing the jitter from
// rnd (a number in [0, 1)).
func (b Backoff) Delay(n int, rnd func() float64) time.Duration {
	if b.Base <= 0 || n < 1 {
		return 0
	}
	d := b.Base
	for i := 1; i < n; i++ {
		if b.Cap > 0 && d >= b.Cap || d > time.Duration(1<<62)/2 {
			break
		}
		d *= 2
	}
	if b.Cap > 0 && d > b.Cap {
		d = b.Cap
	}
	if b.Jitter > 0 && rnd != nil {
		j := min(b.Jitter, 1)
		d = time.Duration(float64(d) * ((1 - j) + rnd()*j))
	}
	return d
}
