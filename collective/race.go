//go:build race

package collective

import "sync/atomic"

// The race detector does not see atomics on memory outside the Go heap, so
// it cannot see the ordering the shared-memory counters give (one rank's
// reads of its buffer before another's writes to it, through the ring). In
// race builds, every publish and every completed wait also touch one Go
// variable, whose atomic operations it does see.
var raceClock atomic.Uint64

func raceRelease() { raceClock.Add(1) }
func raceAcquire() { raceClock.Load() }
