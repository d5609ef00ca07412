//go:build race

package stream

// raceOn: the race detector adds allocations of its own, which tests that count them skip.
const raceOn = true
