//go:build race

package httpapi_test

// raceOn: the race detector's instrumentation makes every frame larger.
const raceOn = true
