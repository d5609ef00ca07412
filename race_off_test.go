//go:build !race

package parley

const raceOn = false
