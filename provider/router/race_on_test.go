//go:build race

package router

// raceOn: the race detector's instrumentation makes every frame larger.
const raceOn = true
