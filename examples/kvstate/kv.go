// Package kvstate is a fleet State on any key-value store that offers
// compare-and-swap (etcd, Consul, DynamoDB's conditional writes, a SQL row
// with a version column), written the way a user outside the retrace
// repository writes one: it imports only retrace's public packages
// (policies/state for the contract, policies/statetest for the proof), and
// its module path is not under retrace's, so an internal type in the
// contract would not compile here.
//
// Each step reads the record, applies the step to a copy and writes it back
// only if no other worker wrote in between; a worker that lost the race
// reads again. That is what makes a step atomic on a store without
// transactions.
package kvstate

import (
	"context"
	"sync"
)

// KV is the key-value store: a value and its version, and a write that
// succeeds only while the version is the one read. Version 0 is a key that
// does not exist.
type KV interface {
	Get(ctx context.Context, key string) (value []byte, version uint64, err error)
	CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (bool, error)
}

// MemKV is a KV in memory, standing in for the store a fleet shares.
type MemKV struct {
	mu   sync.Mutex
	vals map[string]versioned
	next uint64
}

type versioned struct {
	val []byte
	ver uint64
}

// NewMemKV returns an empty MemKV.
func NewMemKV() *MemKV { return &MemKV{vals: map[string]versioned{}} }

// Get implements KV.
func (m *MemKV) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.vals[key]
	return v.val, v.ver, nil
}

// CompareAndSwap implements KV.
func (m *MemKV) CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.vals[key].ver != version {
		return false, nil
	}
	m.next++
	m.vals[key] = versioned{val: append([]byte(nil), value...), ver: m.next}
	return true, nil
}
