//go:build race

package upstream

// raceOn: sync.Pool drops what it is given at random under the race detector.
const raceOn = true
