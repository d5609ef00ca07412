//go:build race

package runs

// raceOn: the race detector slows every store write several times over, so load tests scale down.
const raceOn = true
