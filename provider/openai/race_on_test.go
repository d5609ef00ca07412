//go:build race

package openai

// raceOn: the race detector's instrumentation makes every frame larger.
const raceOn = true
