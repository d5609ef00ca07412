//go:build !race

package runs

const raceOn = false
