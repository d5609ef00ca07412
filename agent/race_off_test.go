//go:build !race

package agent

// raceOn: the race detector's instrumentation makes every frame larger.
const raceOn = false
