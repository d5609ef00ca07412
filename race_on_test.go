//go:build race

package parley

// raceOn: with the race detector on, the compiler keeps fewer values on the stack, so
// allocation counts are checked without it only.
const raceOn = true
