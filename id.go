package parley

import (
	"crypto/rand"
	"sync"
	"time"
)

// ids is what NewID keeps between calls: the last time stamp it gave, so that every id it
// returns sorts after the one before, within a millisecond too.
var ids struct {
	mu   sync.Mutex
	last int64 // milliseconds since the Unix epoch << 12 | the 12-bit fraction of that millisecond
}

// NewID returns a new time-ordered identifier: a UUID version 7 (RFC 9562) in its 36-character
// text form. Its 48-bit time stamp is in milliseconds; the next 12 bits (rand_a) carry the
// fraction of the millisecond, in steps of 256 ns, and are raised by one when the clock has not
// moved past the last id, so the ids of one process sort in the order they were made (RFC 9562
// §6.2, method 3). The other 62 bits are random.
func NewID() string {
	var u [16]byte
	rand.Read(u[8:]) // never fails; u does not escape
	nano := time.Now().UnixNano()
	ms := nano / int64(time.Millisecond)
	stamp := ms<<12 | (nano-ms*int64(time.Millisecond))>>8
	ids.mu.Lock()
	if stamp <= ids.last {
		stamp = ids.last + 1
	}
	ids.last = stamp
	ids.mu.Unlock()
	ms, frac := stamp>>12, stamp&0xfff
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x70 | byte(frac>>8) // version 7
	u[7] = byte(frac)
	u[8] = 0x80 | u[8]&0x3f // variant 10
	return formatUUID(&u)
}

// formatUUID writes u as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, in lower case.
func formatUUID(u *[16]byte) string {
	const hexDigits = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(b[:])
}
