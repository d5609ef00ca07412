//go:build !race

package stream

const raceOn = false
